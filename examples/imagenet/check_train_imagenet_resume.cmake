# A train_imagenet checkpoint of 4 processes resumed on 4, 2 and 3 (check_resume_other_count.cmake),
# on 192 + 48 Fashion-MNIST images converted to 32 x 32 JPEGs: ResNet-18, a global batch of 24
# (8 steps an epoch), two epochs with a checkpoint after the first. The losses of runs on 2 and 3
# processes are not compared: BatchNorm normalises over each process's batch, which changes size.
# Inputs (-D): TOOL (idx_to_jpeg; empty without TurboJPEG), DATA (the IDX folder), OUT, MPIEXEC,
# NP_FLAG, PROGRAM (train_imagenet).
set(LIMIT 192)
include(${CMAKE_CURRENT_LIST_DIR}/jpeg_fixture.cmake)
if(JPEG_FIXTURE_SKIPPED)
  return()
endif()
set(ARGS "${PROGRAM}|${OUT}/data/train.txt|${OUT}/data/val.txt|--root|${OUT}/data|-a|resnet18|-E|2|--crop-size|32")
string(APPEND ARGS "|-j|1|--lr|0.005|--val-batchsize|16|--snapshot-every|1|--keep|2")
set(BATCH_FLAG -B)
set(BATCH 6)
set(SAVED 4)
set(OTHERS "2|3")
set(REFUSED 5)
set(SNAPSHOT snapshot_iter_8.safetensors)
set(LOSS_TOLERANCE "")
set(OUT ${OUT}/runs)
include(${CMAKE_CURRENT_LIST_DIR}/../check_resume_other_count.cmake)
