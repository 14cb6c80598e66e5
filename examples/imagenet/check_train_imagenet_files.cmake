# Real ImageNet files under mpiexec: a list holding CMYK and YCCK JPEGs and PNGs (one named .jpg)
# trains; a list with one broken file stops the run by default, naming the list's line and the
# reason, and trains with --skip-bad-images, which reports the skip at the epoch's end and the run's.
# Inputs (-D): IMAGES (tests/golden/images), OUT (a scratch folder), RUN (mpiexec and its arguments
# and the program, words separated by |), HAVE_CODECS (ON when both JPEG and PNG decode).
if(NOT HAVE_CODECS)
  message("SKIPPED: this build lacks TurboJPEG or libpng, so CMYK JPEGs or PNGs cannot decode")
  return()
endif()
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
file(WRITE ${OUT}/broken.jpg "not a JPEG")
set(good "cmyk.jpg 0\nycck.jpg 1\npng_named.jpg 0\nrgb8.png 1\ngrey8.png 0\npalette8.png 1\nrgba16.png 0\n")
file(WRITE ${OUT}/train.txt "${good}grey16.png 1\n")
file(WRITE ${OUT}/broken.txt "${good}${OUT}/broken.jpg 1\n")
file(WRITE ${OUT}/val.txt "ycck.jpg 1\nrgba8.png 0\n")
# Each rank validates on two images, so the broken one has a batch-mate to stand in for it.
file(WRITE ${OUT}/broken_val.txt "ycck.jpg 1\nrgba8.png 0\ncmyk.jpg 0\n${OUT}/broken.jpg 0\n")

string(REPLACE "|" ";" RUN "${RUN}")
# Fails unless the run of `list` logged one entry per epoch, 2.
function(expect_two_epochs list)
  file(READ ${OUT}/result-${list}/log log)
  string(JSON entries LENGTH "${log}")
  if(NOT entries EQUAL 2)
    message(FATAL_ERROR "the log of the run on ${list} has ${entries} entries; expected one per epoch, 2")
  endif()
endfunction()
# 8 images, 2 ranks, -B 2: every image is in a batch of every epoch.
function(train list val result)
  execute_process(COMMAND ${RUN} ${OUT}/${list} ${OUT}/${val} --root ${IMAGES} -a resnet18 -E 2 -B 2 --crop-size 32
                          -j 1 --classes 2 -o ${OUT}/result-${list} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 200)
  set(${result}_rc ${rc} PARENT_SCOPE)
  set(${result}_out "${out}${err}" PARENT_SCOPE)
endfunction()

train(train.txt val.txt files)
message("${files_out}")
if(NOT files_rc EQUAL 0 OR files_out MATCHES "rank [0-9]+:")
  message(FATAL_ERROR "train_imagenet on CMYK, YCCK and PNG files failed (${files_rc})")
endif()
expect_two_epochs(train.txt)

train(broken.txt val.txt strict)
message("${strict_out}")
if(strict_rc EQUAL 0 OR NOT strict_out MATCHES "broken.txt:8: ${OUT}/broken.jpg: not a readable JPEG header")
  message(FATAL_ERROR "a broken image ended the run with ${strict_rc}; expected a failure naming broken.txt:8 and the reason")
endif()

# The validation list holds the broken file too: replaced there as well, once per evaluation.
train(broken.txt broken_val.txt skipping --skip-bad-images)
message("${skipping_out}")
if(NOT skipping_rc EQUAL 0 OR skipping_out MATCHES "rank [0-9]+:")
  message(FATAL_ERROR "train_imagenet --skip-bad-images failed (${skipping_rc}); expected it to train past the broken image")
endif()
foreach(expected
        "epoch 1: rank [01] skipped 1 training and [01] validation image\\(s\\)[^\n]*\n  [^\n]*broken.txt:8: [^\n]*broken.jpg: not a readable JPEG header"
        "epoch 2: rank [01] skipped 1 training and [01] validation"
        "epoch 1: rank [01] skipped [01] training and 1 validation image\\(s\\)[^\n]*(\n  [^\n]*broken.txt:8:[^\n]*)?\n  [^\n]*broken_val.txt:4: [^\n]*broken.jpg: not a readable JPEG header"
        "the run: rank [01] skipped [0-2] training and 2 validation")
  if(NOT skipping_out MATCHES "${expected}")
    message(FATAL_ERROR "expected the report to match '${expected}'")
  endif()
endforeach()
# Both ranks draw from one order of the whole list, so the broken training image lands on
# whichever rank's share of its global batch holds it: the two ranks skipped it twice together,
# once an epoch.
set(skipped_training 0)
foreach(rank 0 1)
  if(NOT skipping_out MATCHES "the run: rank ${rank} skipped ([0-9]+) training")
    message(FATAL_ERROR "expected the run's report of rank ${rank}")
  endif()
  math(EXPR skipped_training "${skipped_training} + ${CMAKE_MATCH_1}")
endforeach()
if(NOT skipped_training EQUAL 2)
  message(FATAL_ERROR "the ranks skipped ${skipped_training} training images in all; expected the broken one once an epoch, 2")
endif()
expect_two_epochs(broken.txt)
message("CMYK, YCCK and PNG files trained; a broken file failed by default and was skipped and reported with --skip-bad-images")
