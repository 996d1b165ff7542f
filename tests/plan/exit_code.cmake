# Runs COMMAND with ARGS (a list) and passes when it exits with EXIT and its output (stdout and
# stderr) matches PATTERN: a bad flag's exit code and message, which PASS_REGULAR_EXPRESSION
# alone cannot check together.
#   cmake -DCOMMAND=tool "-DARGS=--flag;value" -DEXIT=2 -DPATTERN=regex -P exit_code.cmake
cmake_minimum_required(VERSION 3.20)
execute_process(COMMAND ${COMMAND} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${COMMAND} ${ARGS}\n  exit ${rc}\n${out}${err}")
if(NOT rc STREQUAL "${EXIT}")
    message(FATAL_ERROR "expected exit code ${EXIT}, got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${PATTERN}")
    message(FATAL_ERROR "the output does not match: ${PATTERN}")
endif()
