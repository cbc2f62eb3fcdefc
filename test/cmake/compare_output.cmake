# Runs PROGRAM with the ;-separated ARGS and fails unless its standard output equals the file
# EXPECTED byte for byte.
execute_process(
  COMMAND ${PROGRAM} ${ARGS}
  OUTPUT_VARIABLE actual
  ERROR_VARIABLE errors
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} ${ARGS} exited with ${status}:\n${errors}")
endif()
file(READ "${EXPECTED}" expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "output of ${PROGRAM} ${ARGS} differs from ${EXPECTED}\n--- expected\n${expected}\n--- actual\n${actual}")
endif()
