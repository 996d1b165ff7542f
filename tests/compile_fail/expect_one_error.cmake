# Builds one compile-fail target and passes only when the compiler stopped with exactly one
# error and that error carries weft's message (EXPECTED, a regular expression): a check
# that lets a second, unreadable error through would not be "one readable message".
#   cmake -DBUILD_DIR=... -DTARGET=... -DCONFIG=... -DEXPECTED=... -P expect_one_error.cmake
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET} --config ${CONFIG}
                RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(result EQUAL 0)
    message(FATAL_ERROR "${TARGET} compiled, but it must not:\n${output}")
endif()
# Semicolons would split the matches as a CMake list: weft's messages contain some.
string(REPLACE ";" "," output "${output}")
string(REGEX MATCHALL "[^\n]*: error: [^\n]*" errors "${output}")
list(LENGTH errors count)
if(NOT count EQUAL 1)
    message(FATAL_ERROR "${TARGET} failed with ${count} errors, not exactly one:\n${output}")
endif()
if(NOT errors MATCHES "${EXPECTED}")
    message(FATAL_ERROR "${TARGET}'s one error is not weft's message (${EXPECTED}):\n${output}")
endif()
message(STATUS "${TARGET}: one error, weft's: ${errors}")
