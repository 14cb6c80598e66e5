# Included by the train_imagenet checks: converts the first LIMIT images of each Fashion-MNIST
# split into ${OUT}/data as 32 x 32 JPEGs with their lists (train.txt, val.txt), after emptying
# OUT. Without TurboJPEG or without the data set it prints why and sets JPEG_FIXTURE_SKIPPED, on
# which the includer returns (CMake's return() here would end this file only).
# Inputs: TOOL (idx_to_jpeg; empty without TurboJPEG), DATA (the IDX folder), OUT, LIMIT.
set(JPEG_FIXTURE_SKIPPED FALSE)
if(NOT TOOL)
  message("SKIPPED: this build has no TurboJPEG, so no JPEG decoder and no idx_to_jpeg")
  set(JPEG_FIXTURE_SKIPPED TRUE)
  return()
endif()
if(NOT EXISTS ${DATA}/train-images-idx3-ubyte.gz AND NOT EXISTS ${DATA}/train-images-idx3-ubyte)
  message("SKIPPED: ${DATA} is absent (Debian package dataset-fashion-mnist)")
  set(JPEG_FIXTURE_SKIPPED TRUE)
  return()
endif()
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${TOOL} --data ${DATA} -o ${OUT}/data --size 32 --limit ${LIMIT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 100)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${out}\nidx_to_jpeg exited with ${rc}; expected 0")
endif()
