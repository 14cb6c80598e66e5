# End to end: train_mnist writes a checkpoint of a tiny data set, extract_weights writes its model
# as weights (names without the checkpoint's "model/" prefix), and refuses a file that is not a
# checkpoint. Inputs (-D): TOOL, MNIST (train_mnist), PYTHON, FIXTURE (write_idx_fixture.py), OUT.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${PYTHON} ${FIXTURE} ${OUT}/data RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not write the data set fixture")
endif()
execute_process(COMMAND ${MNIST} -b 2 -u 10 -e 1 --data ${OUT}/data --snapshot-every 1 -o ${OUT}/result
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT EXISTS ${OUT}/result/snapshot_iter_4.safetensors)
  message(FATAL_ERROR "train_mnist did not write result/snapshot_iter_4.safetensors:\n${out}")
endif()

execute_process(COMMAND ${TOOL} ${OUT}/result/snapshot_iter_4.safetensors ${OUT}/weights.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT out MATCHES "wrote 6 tensors to .*weights.safetensors \\(first: 'l1.weight'\\)")
  message(FATAL_ERROR "expected 'wrote 6 tensors ... (first: 'l1.weight')', got (rc ${rc}):\n${out}")
endif()
file(READ ${OUT}/weights.safetensors header OFFSET 8 LIMIT 2000)  # after the 8-byte header length
if(header MATCHES "model/" OR NOT header MATCHES "\"l3.bias\"")
  message(FATAL_ERROR "the names in the weights file are not the model's own:\n${header}")
endif()

# A file of weights is not a checkpoint: refused with what was expected.
execute_process(COMMAND ${TOOL} ${OUT}/weights.safetensors ${OUT}/again.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 60)
if(rc EQUAL 0 OR NOT out MATCHES "is not a dpl checkpoint: expected \"format\": \"dpl-checkpoint-1\"")
  message(FATAL_ERROR "a weights file was not refused as a checkpoint (rc ${rc}):\n${out}")
endif()
if(EXISTS ${OUT}/again.safetensors)
  message(FATAL_ERROR "a refused run left ${OUT}/again.safetensors behind")
endif()
