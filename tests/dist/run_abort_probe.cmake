# Runs a probe (dist_abort_probe, dist_non_finite_probe) under mpiexec and checks that an error
# ends every rank: a non-zero exit, the expected message in the output, and well within the time
# limit. Inputs (-D): MPIEXEC, NP_FLAG, NP, EXTRA_FLAGS (;-list), PROBE, MODE (the probe's
# argument: "throw" or "exit"; "dist" or "single"),
# EXPECT (a string the output must contain), EXPECT2 (optional: a second one), LIMIT (seconds).

string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} ${NP} ${EXTRA_FLAGS} ${PROBE} ${MODE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out
  TIMEOUT 60)
string(TIMESTAMP stop "%s")
math(EXPR elapsed "${stop} - ${start}")
message("${out}")
message("exit: ${rc}; ${elapsed} s")

if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited with status 0; expected a failure")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself: ${rc}")
endif()
string(FIND "${out}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the output lacks '${EXPECT}'")
endif()
if(DEFINED EXPECT2)
  string(FIND "${out}" "${EXPECT2}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the output lacks '${EXPECT2}'")
  endif()
endif()
if(elapsed GREATER LIMIT)
  message(FATAL_ERROR "the job took ${elapsed} s to end; expected at most ${LIMIT} s")
endif()
