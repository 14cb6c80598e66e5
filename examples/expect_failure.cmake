# Runs a command that must fail: a non-zero exit and EXPECT in its output, within 60 s.
# Inputs (-D): COMMAND (its words separated by |), EXPECT (a string the output must contain).
string(REPLACE "|" ";" COMMAND "${COMMAND}")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 60)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the command succeeded; expected it to fail with '${EXPECT}'")
endif()
string(FIND "${out}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the output lacks '${EXPECT}'")
endif()
