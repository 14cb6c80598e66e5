# Trains a tiny GPT-2 with train_gpt2 on two ranks and checks what it reports; then resumes the
# run from its snapshot at step 60 and checks that the rows after it are the first run's.
# Inputs (-D): RUN (mpiexec, its flags, the program and its data flags, words separated by |),
# OUT (a folder).
string(REPLACE "|" ";" RUN "${RUN}")
file(REMOVE_RECURSE ${OUT})
# 2 layers of width 64 on byte tokens; 4 sequences of 64 tokens per micro-batch on each of the two
# ranks and 1024 tokens per step: two micro-batches per step.
set(recipe --layers 2 --heads 4 --embd 64 --block-size 64 -b 4 -t 64 --total-batch-tokens 1024 --steps 120
           --lr 3e-3 --warmup 10 --log-every 20 --val-every 20 --val-steps 4 --sample-tokens 48 --snapshot-every 60)

# Runs the program with the recipe and further flags; sets <result> to its report rows without
# their timings (iteration, epoch, main/loss, validation/main/loss) and <output> to all it printed.
function(run_program result output)
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${RUN} ${recipe} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  message("${out}${err}\n(${seconds} s)")
  if(NOT rc EQUAL 0 OR err MATCHES "rank [0-9]+:")
    message(FATAL_ERROR "train_gpt2 failed (${rc})")
  endif()
  # A row: iteration, epoch, main/loss, then validation/main/loss or a blank column.
  string(REGEX MATCHALL "\n[0-9]+ +[0-9]+ +[0-9.e+-]+ +[0-9.e+-]* " rows "\n${out}")
  set(${result} "${rows}" PARENT_SCOPE)
  set(${output} "${out}" PARENT_SCOPE)
endfunction()

run_program(first out -o ${OUT}/first)
list(LENGTH first count)
if(NOT count EQUAL 6)
  message(FATAL_ERROR "expected 6 report rows (steps 20, 40, ..., 120), got ${count}: ${first}")
endif()
list(GET first 0 row20)
list(GET first 5 row120)
string(REGEX REPLACE "\n[0-9]+ +[0-9]+ +([0-9.e+-]+) .*" "\\1" loss20 "${row20}")
string(REGEX REPLACE "\n[0-9]+ +[0-9]+ +[0-9.e+-]+ +([0-9.e+-]+) .*" "\\1" val120 "${row120}")
# ln 256 = 5.55 at the start. A model that ignores the context reaches at best the entropy of the
# validation files' bytes, 2.94 nats (their bigrams: 2.06); below 2.8 it uses what came before
# (about 2.6 after 120 steps).
if(NOT loss20 GREATER 3.0)
  message(FATAL_ERROR "the mean loss of steps 1-20 is ${loss20}; expected it above 3 (the start is ln 256 = 5.55)")
endif()
if(NOT val120 LESS 2.8)
  message(FATAL_ERROR "the validation loss after 120 steps is ${val120}; expected below 2.8")
endif()
if(NOT out MATCHES "allreduce: 120 call\\(s\\) in 120 optimizer step\\(s\\) of 2 micro-batch\\(es\\) each")
  message(FATAL_ERROR "expected one allreduce per optimizer step (120 in 120 steps of 2 micro-batches)")
endif()
if(NOT out MATCHES "\nsample \\(top-k 40, [0-9]+ tokens\\):\n-----\n")
  message(FATAL_ERROR "expected a sample of text at the end")
endif()
foreach(file log model.safetensors snapshot_iter_60.safetensors)
  if(NOT EXISTS ${OUT}/first/${file})
    message(FATAL_ERROR "expected ${OUT}/first/${file}")
  endif()
endforeach()

run_program(resumed resumed_out -o ${OUT}/resumed --resume ${OUT}/first/snapshot_iter_60.safetensors)
list(SUBLIST first 3 3 expected)
if(NOT resumed STREQUAL expected)
  message(FATAL_ERROR "the resumed run printed\n${resumed}\nexpected the first run's\n${expected}")
endif()
message("loss ${loss20} (steps 1-20) -> validation ${val120} (step 120); the resumed run printed the first run's rows")
