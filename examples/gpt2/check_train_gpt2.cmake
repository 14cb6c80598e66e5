# Trains a tiny GPT-2 with train_gpt2 on two ranks and checks what it reports; then resumes the
# run from its snapshot at step 60, on two ranks and on one (with twice the micro-batch, so the
# same tokens per step), and checks that both print the first run's rows after it.
# Inputs (-D): MPIEXEC (the mpiexec command), PROGRAM (train_gpt2), SHARDS (the folder of
# pystdlib_train_*.bin and pystdlib_val_*.bin), OUT (a folder).
file(REMOVE_RECURSE ${OUT})
# 2 layers of width 64 on byte tokens, 1024 tokens per step: on two ranks, two micro-batches of 4
# sequences of 64 tokens each.
set(recipe -i ${SHARDS}/pystdlib_train_*.bin -j ${SHARDS}/pystdlib_val_*.bin --layers 2 --heads 4 --embd 64
           --block-size 64 -t 64 --total-batch-tokens 1024 --steps 120 --lr 3e-3 --warmup 10 --log-every 20
           --val-every 20 --val-steps 4 --sample-tokens 48 --snapshot-every 60)

# Runs the program on `ranks` processes with the recipe and further flags; sets <result> to its
# report rows without their timings (iteration, epoch, main/loss, validation/main/loss) and
# <output> to all it printed.
function(run_program result output ranks)
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${MPIEXEC} -n ${ranks} --oversubscribe --bind-to none ${PROGRAM} ${recipe} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  message("${out}${err}\n(${seconds} s)")
  if(NOT rc EQUAL 0 OR err MATCHES "rank [0-9]+:")
    message(FATAL_ERROR "train_gpt2 failed (${rc})")
  endif()
  string(REGEX MATCHALL "\n[0-9]+ +[0-9]+ +[0-9.e+-]+ +[0-9.e+-]+ " rows "\n${out}")
  set(${result} "${rows}" PARENT_SCOPE)
  set(${output} "${out}" PARENT_SCOPE)
endfunction()

run_program(first out 2 -b 4 -o ${OUT}/first)
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
# (about 2.7 after 120 steps).
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

list(SUBLIST first 3 3 expected)
# On one rank the same windows make each step: the loader's position is global.
foreach(ranks 2 1)
  math(EXPR batch "8 / ${ranks}")
  run_program(resumed resumed_out ${ranks} -b ${batch} -o ${OUT}/resumed-${ranks}
              --resume ${OUT}/first/snapshot_iter_60.safetensors)
  if(NOT resumed STREQUAL expected)
    message(FATAL_ERROR "the run resumed on ${ranks} rank(s) printed\n${resumed}\nexpected the first run's\n${expected}")
  endif()
endforeach()
message("loss ${loss20} (steps 1-20) -> validation ${val120} (step 120); the runs resumed on 2 and 1 rank(s) printed the first run's rows")
