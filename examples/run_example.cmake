# Runs one example for ctest: echoes its output (which the test's
# PASS_REGULAR_EXPRESSION then checks) and fails on a non-zero exit status,
# which ctest alone ignores once a PASS_REGULAR_EXPRESSION is set.
#   cmake -DEXAMPLE=<program> [-DARGS=<;-list>] [-DEMULATOR=<;-list>] -P run_example.cmake
# EMULATOR: what runs a cross build's program (CMAKE_CROSSCOMPILING_EMULATOR).
execute_process(COMMAND ${EMULATOR} ${EXAMPLE} ${ARGS}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "example exited with status ${status}")
endif()
