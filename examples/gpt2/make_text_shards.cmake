# Writes byte-level token shards of a few modules of the Python standard library, split by file
# into training and validation (every fourth file validates): a small real corpus that every
# machine with Python has, for the tests of train_gpt2.
# Inputs (-D): TOOL (text_to_token_shards), PYTHON (an interpreter), OUT (a folder; the shards are
# OUT/pystdlib_train_*.bin and OUT/pystdlib_val_*.bin).
execute_process(COMMAND ${PYTHON} -c "import sysconfig; print(sysconfig.get_paths()['stdlib'], end='')"
                OUTPUT_VARIABLE stdlib RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT IS_DIRECTORY "${stdlib}")
  message(FATAL_ERROR "${PYTHON} names no standard library folder (got '${stdlib}')")
endif()
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT}/corpus)
# Modules that every Python 3 since 3.6 ships, about 120 kB together.
foreach(module bisect calendar colorsys fnmatch glob heapq queue sched shlex textwrap)
  if(NOT EXISTS ${stdlib}/${module}.py)
    message(FATAL_ERROR "${stdlib}/${module}.py is missing")
  endif()
  file(COPY ${stdlib}/${module}.py DESTINATION ${OUT}/corpus)
endforeach()
execute_process(COMMAND ${TOOL} ${OUT}/corpus --ext .py --val-every 4 -o ${OUT}/pystdlib RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "text_to_token_shards failed (${rc})")
endif()
