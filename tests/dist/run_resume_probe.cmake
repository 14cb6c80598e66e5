# Checks that a resumed run is exact: dist_resume_probe trains TOTAL iterations in one job, and
# in two jobs (STOP iterations and a checkpoint, then a new mpiexec that resumes to TOTAL); the
# two final weights files must be identical byte for byte, as must the logs' training values.
# Inputs (-D): MPIEXEC, NP_FLAG, NP, EXTRA_FLAGS (;-list), PROBE, COMM, STOP, TOTAL, WORK (a folder).

file(REMOVE_RECURSE ${WORK})
function(run_job)
  execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} ${NP} ${EXTRA_FLAGS} ${PROBE} ${COMM} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dist_resume_probe ${COMM} ${ARGN} failed (${rc}):\n${out}")
  endif()
endfunction()

run_job(${TOTAL} ${WORK}/straight)
run_job(${STOP} ${WORK}/resumed)
run_job(${TOTAL} ${WORK}/resumed ${WORK}/resumed/snapshot_iter_${STOP}.safetensors)

execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/straight/final.safetensors
                        ${WORK}/resumed/final.safetensors RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "${COMM}: the weights after ${STOP} + resume + ${TOTAL} iterations differ from "
                      "those of ${TOTAL} iterations in one run")
endif()
# The logs agree in everything but the wall-clock times.
foreach(run straight resumed)
  file(READ ${WORK}/${run}/log text)
  string(REGEX REPLACE "\"elapsed_time\": [0-9.e+-]+" "" text "${text}")
  set(log_${run} "${text}")
endforeach()
if(NOT log_straight STREQUAL log_resumed)
  message(FATAL_ERROR "${COMM}: the resumed log differs:\n${log_straight}\n---\n${log_resumed}")
endif()
message("${COMM}: ${STOP} + resume + ${TOTAL} iterations gave the same weights and log as ${TOTAL} in one run")
