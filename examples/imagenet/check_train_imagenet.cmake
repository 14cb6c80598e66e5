# Converts a few hundred Fashion-MNIST images to JPEG with idx_to_jpeg, trains train_imagenet on
# them for two epochs and checks that the run succeeds and that the training loss of the last
# log entry is below that of the first; then that a list naming a missing file, and one naming a
# corrupt JPEG, stop the run with the list's file:line and the reason.
# Inputs (-D): TOOL (idx_to_jpeg; empty without TurboJPEG), DATA (the IDX folder), OUT (a scratch
# folder), RUN (mpiexec and its arguments and the program, words separated by |), and optionally
# EXTRA (more train_imagenet flags, separated by |) and TRAIN_ONLY (1: only the training run).
set(LIMIT 320)
include(${CMAKE_CURRENT_LIST_DIR}/jpeg_fixture.cmake)
if(JPEG_FIXTURE_SKIPPED)
  return()
endif()

string(REPLACE "|" ";" RUN "${RUN}")
string(REPLACE "|" ";" EXTRA "${EXTRA}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${RUN} ${OUT}/data/train.txt ${OUT}/data/val.txt --root ${OUT}/data -a resnet18 -E 2
                        -B 16 --crop-size 32 -j 1 --lr 0.005 -o ${OUT}/result ${EXTRA}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 200)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
message("${out}${err}")
if(NOT rc EQUAL 0 OR err MATCHES "rank [0-9]+:")
  message(FATAL_ERROR "train_imagenet failed (${rc})")
endif()

file(READ ${OUT}/result/log log)
string(JSON entries LENGTH "${log}")
if(entries LESS 2)
  message(FATAL_ERROR "the log has ${entries} entries; expected one per epoch, at least 2")
endif()
math(EXPR last "${entries} - 1")
string(JSON first_loss GET "${log}" 0 "main/loss")
string(JSON last_loss GET "${log}" ${last} "main/loss")
string(JSON val_loss GET "${log}" ${last} "validation/main/loss")
# CMake compares numbers as doubles, so the log's decimal text can be compared directly.
if(NOT last_loss LESS first_loss)
  message(FATAL_ERROR "the training loss went from ${first_loss} (first entry) to ${last_loss} (last); expected it to fall")
endif()
message("the training loss fell from ${first_loss} to ${last_loss} (validation loss ${val_loss}) in ${seconds} s")
if(TRAIN_ONLY)
  return()
endif()

# A bad image among 32 lines: with 2 processes and -B 16 every line is in a batch of the first
# epoch, so the run must stop there, naming the list line.
file(STRINGS ${OUT}/data/train.txt good LIMIT_COUNT 31)
file(WRITE ${OUT}/data/corrupt.jpg "not a JPEG")
foreach(case missing corrupt)
  if(case STREQUAL missing)
    set(bad_line "train/0/missing.jpg 0")
    set(reason "cannot open")
  else()
    set(bad_line "corrupt.jpg 0")
    set(reason "corrupt.jpg: not a readable JPEG header")
  endif()
  list(JOIN good "\n" text)
  file(WRITE ${OUT}/data/${case}.txt "${bad_line}\n${text}\n")
  execute_process(COMMAND ${RUN} ${OUT}/data/${case}.txt ${OUT}/data/val.txt --root ${OUT}/data -a resnet18 -E 1
                          -B 16 --crop-size 32 -j 1 -o ${OUT}/result-${case}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${out}${err}\nthe run with ${case}.txt succeeded; expected it to stop at line 1")
  endif()
  string(FIND "${out}${err}" "${case}.txt:1: " at)
  string(FIND "${out}${err}" "${reason}" why)
  if(at EQUAL -1 OR why EQUAL -1)
    message(FATAL_ERROR "${out}${err}\nexpected '${case}.txt:1: ... ${reason}' in the run's errors")
  endif()
  message("the run with a ${case} image stopped with '${case}.txt:1: ... ${reason}'")
endforeach()
