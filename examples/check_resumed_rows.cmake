# Runs the training-state page's program from the start, then again resuming from its checkpoint
# at iteration 160, and checks that the resumed run prints exactly the first run's rows for
# iterations 200 and 240, and no earlier row.
# Inputs (-D): RUN (the mpiexec command and the program, words separated by |), OUT (a folder).
string(REPLACE "|" ";" RUN "${RUN}")
file(REMOVE_RECURSE ${OUT})
function(run_program result)
  execute_process(COMMAND ${RUN} ${OUT} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 100)
  message("${out}${err}")
  if(NOT rc EQUAL 0 OR err MATCHES "rank [0-9]+:")
    message(FATAL_ERROR "the program failed (${rc})")
  endif()
  string(REGEX MATCHALL "\n[0-9]+ [^\n]*" rows "\n${out}")
  set(${result} "${rows}" PARENT_SCOPE)
endfunction()

run_program(first)
run_program(resumed ${OUT}/snapshot_iter_160.safetensors)
list(SUBLIST first 4 2 expected)
if(NOT resumed STREQUAL expected)
  message(FATAL_ERROR "the resumed run printed\n${resumed}\nexpected the first run's\n${expected}")
endif()
message("the resumed run printed the first run's rows for iterations 200 and 240")
