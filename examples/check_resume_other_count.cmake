# Resuming a checkpoint on another number of processes: runs a program from the start on SAVED
# processes with a checkpoint along the way, then resumes that checkpoint on SAVED processes
# (whose log must equal the first run's, digit for digit: exact) and on each count of OTHERS
# (which must finish, continue at the checkpoint's epoch and iteration with the same global
# batch, and, given LOSS_TOLERANCE, train to the first run's losses within it); then checks that
# a count that does not divide the global batch, and a per-process batch that makes another
# global batch, are refused on every rank with the reason.
# Inputs (-D): MPIEXEC (mpiexec and its flags, words separated by |), NP_FLAG, ARGS (the program
# and its flags, separated by |), BATCH_FLAG (-b or -B), BATCH (per process on SAVED), SAVED,
# OTHERS (counts, separated by |), REFUSED (a count that does not divide the global batch),
# SNAPSHOT (the checkpoint's file name), OUT (a folder), LOSS_TOLERANCE (relative; empty: none)
# and PYTHON (an interpreter, for that comparison).
string(REPLACE "|" ";" MPIEXEC "${MPIEXEC}")
string(REPLACE "|" ";" ARGS "${ARGS}")
string(REPLACE "|" ";" OTHERS "${OTHERS}")
file(REMOVE_RECURSE ${OUT})
math(EXPR global "${BATCH} * ${SAVED}")

# run(<np> <name> [flags...]): the program on np processes with -o OUT/name; sets rc and text.
function(run np name)
  string(TIMESTAMP start "%s")
  execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} ${np} ${ARGS} -o ${OUT}/${name} ${ARGN}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  string(TIMESTAMP stop "%s")
  math(EXPR seconds "${stop} - ${start}")
  message("--- ${name} on ${np} processes (${seconds} s): exit ${code}")
  set(rc ${code} PARENT_SCOPE)
  set(text "${out}${err}" PARENT_SCOPE)
endfunction()

# The log's entries as "epoch iteration main/loss" lines, in a list.
function(read_log name result)
  file(READ ${OUT}/${name}/log log)
  string(JSON n LENGTH "${log}")
  set(rows "")
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON epoch GET "${log}" ${i} epoch)
    string(JSON iteration GET "${log}" ${i} iteration)
    string(JSON loss GET "${log}" ${i} main/loss)
    list(APPEND rows "${epoch} ${iteration} ${loss}")
  endforeach()
  set(${result} "${rows}" PARENT_SCOPE)
endfunction()

function(must_succeed)
  if(NOT rc EQUAL 0 OR text MATCHES "rank [0-9]+:")
    message(FATAL_ERROR "${text}\nthe run failed (${rc}); expected it to finish")
  endif()
endfunction()

run(${SAVED} straight ${BATCH_FLAG} ${BATCH})
must_succeed()
read_log(straight straight_rows)
set(checkpoint ${OUT}/straight/${SNAPSHOT})
if(NOT EXISTS ${checkpoint})
  message(FATAL_ERROR "${text}\nthe first run left no ${checkpoint}")
endif()
string(REGEX MATCH "[0-9]+" stop "${SNAPSHOT}")

# The same count: every entry, losses included, digit for digit.
run(${SAVED} same --resume ${checkpoint})
must_succeed()
read_log(same same_rows)
if(NOT same_rows STREQUAL straight_rows)
  message(FATAL_ERROR "resumed on ${SAVED} processes the log is\n${same_rows}\nexpected the first run's\n${straight_rows}")
endif()
message("on ${SAVED} processes the resumed run's log equals the first run's: ${same_rows}")

foreach(np ${OTHERS})
  math(EXPR share "${global} / ${np}")
  run(${np} other-${np} --resume ${checkpoint})
  must_succeed()
  if(NOT text MATCHES "Minibatch-size: ${share} \\(global ${global}\\)")
    message(FATAL_ERROR "${text}\nexpected 'Minibatch-size: ${share} (global ${global})' on ${np} processes")
  endif()
  read_log(other-${np} rows)
  list(LENGTH rows count)
  list(LENGTH straight_rows expected_count)
  if(NOT count EQUAL expected_count)
    message(FATAL_ERROR "resumed on ${np} processes the log is\n${rows}\nexpected as many entries as\n${straight_rows}")
  endif()
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    list(GET rows ${i} row)
    list(GET straight_rows ${i} want)
    string(REPLACE " " ";" row "${row}")
    string(REPLACE " " ";" want "${want}")
    list(GET row 0 epoch)
    list(GET row 1 iteration)
    list(GET row 2 loss)
    list(GET want 0 want_epoch)
    list(GET want 1 want_iteration)
    list(GET want 2 want_loss)
    # The same epochs at the same iterations: the global batch, and the position, were kept.
    if(NOT epoch EQUAL want_epoch OR NOT iteration EQUAL want_iteration)
      message(FATAL_ERROR "resumed on ${np} processes, entry ${i} is epoch ${epoch} at iteration ${iteration}; "
                          "expected epoch ${want_epoch} at iteration ${want_iteration}:\n${rows}")
    endif()
    # Entries up to the checkpoint are restored from it; later ones were trained on np processes.
    if(iteration LESS_EQUAL stop AND NOT loss STREQUAL want_loss)
      message(FATAL_ERROR "resumed on ${np} processes, the restored entry ${i} has loss ${loss}; expected ${want_loss}")
    endif()
    if(NOT loss MATCHES "^[0-9]")
      message(FATAL_ERROR "resumed on ${np} processes, entry ${i} has loss ${loss}; expected a finite number")
    endif()
    if(iteration GREATER stop AND NOT LOSS_TOLERANCE STREQUAL "")
      # CMake has no arithmetic on reals.
      file(WRITE ${OUT}/compare.py "import sys\na, b, t = map(float, sys.argv[1:])\nsys.exit(0 if abs(a - b) <= t * abs(b) else 1)\n")
      execute_process(COMMAND ${PYTHON} ${OUT}/compare.py ${loss} ${want_loss} ${LOSS_TOLERANCE} RESULT_VARIABLE close)
      if(NOT close EQUAL 0)
        message(FATAL_ERROR "resumed on ${np} processes, epoch ${epoch} has loss ${loss}, the first run's ${want_loss}; "
                            "expected them within a relative ${LOSS_TOLERANCE}:\n${rows}\n---\n${straight_rows}")
      endif()
    endif()
  endforeach()
  message("on ${np} processes (${share} per process) the resumed run continued at iteration ${stop}: ${rows}")
endforeach()

# Refusals, on every rank: a count that does not divide the global batch, and the old
# per-process batch on another count.
run(${REFUSED} refused --resume ${checkpoint})
if(rc EQUAL 0 OR NOT text MATCHES "a global batch of ${global} samples does not divide among ${REFUSED} processes")
  message(FATAL_ERROR "${text}\nexpected the run on ${REFUSED} processes to be refused: the global batch does not divide")
endif()
list(GET OTHERS 0 np)
math(EXPR wrong "${BATCH} * ${np}")
run(${np} refused-batch --resume ${checkpoint} ${BATCH_FLAG} ${BATCH})
if(rc EQUAL 0 OR NOT text MATCHES "${BATCH_FLAG} ${BATCH} on ${np} processes makes a global batch of ${wrong}, but")
  message(FATAL_ERROR "${text}\nexpected ${BATCH_FLAG} ${BATCH} on ${np} processes to be refused")
endif()
message("refused: ${REFUSED} processes, and ${BATCH_FLAG} ${BATCH} on ${np}")
