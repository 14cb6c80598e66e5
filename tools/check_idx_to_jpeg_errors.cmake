# Runs idx_to_jpeg on inputs it must refuse and checks what it says and what it leaves behind.
# Inputs (-D): TOOL (the program), DATA (the IDX folder), OUT (a scratch folder).
if(NOT EXISTS ${DATA}/train-images-idx3-ubyte.gz AND NOT EXISTS ${DATA}/train-images-idx3-ubyte)
  message("SKIPPED: ${DATA} is absent (Debian package dataset-fashion-mnist)")
  return()
endif()

# A negative count is refused in a sentence, not with the largest double's 309 digits.
execute_process(COMMAND ${TOOL} --data ${DATA} -o ${OUT} --limit -5
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 60)
if(rc EQUAL 0)
  message(FATAL_ERROR "--limit -5 was accepted; expected a refusal")
endif()
if(NOT out MATCHES "expected a whole number >= 0, got '-5'")
  message(FATAL_ERROR "--limit -5: expected 'expected a whole number >= 0, got '-5'', got:\n${out}")
endif()
if(out MATCHES "[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]")
  message(FATAL_ERROR "--limit -5: the message holds a number of 20 or more digits:\n${out}")
endif()

# A write that fails (here: a file stands where the training images' folder must go) names the
# path and the system's reason once, with one program prefix, and leaves no list behind.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
file(WRITE ${OUT}/train "not a folder")
execute_process(COMMAND ${TOOL} --data ${DATA} -o ${OUT} --size 8 --limit 3
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 60)
if(rc EQUAL 0)
  message(FATAL_ERROR "a blocked output folder was accepted; expected a failure:\n${out}")
endif()
if(NOT out MATCHES "^idx_to_jpeg: cannot create the folder [^\n]*/train/[0-9]: [A-Za-z]")
  message(FATAL_ERROR "expected 'idx_to_jpeg: cannot create the folder .../train/<label>: <reason>', got:\n${out}")
endif()
if(out MATCHES "idx_to_jpeg: idx_to_jpeg:")
  message(FATAL_ERROR "the program's prefix is printed twice:\n${out}")
endif()
foreach(left train.txt train.txt.partial val.txt)
  if(EXISTS ${OUT}/${left})
    message(FATAL_ERROR "the failed run left ${OUT}/${left} behind")
  endif()
endforeach()
message("idx_to_jpeg refused a negative count and a blocked folder, naming each, and left no list")
