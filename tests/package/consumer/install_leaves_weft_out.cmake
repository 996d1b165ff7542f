# Installs the consumer (weft added with add_subdirectory) into PREFIX: the consumer's program
# is there and nothing of weft is (headers, CMake package, weft.pc).
#   cmake -DBINARY_DIR=... -DPREFIX=... -P install_leaves_weft_out.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${PREFIX}"
                OUTPUT_VARIABLE output ERROR_VARIABLE output RESULT_VARIABLE status)
if(NOT status EQUAL 0)
    message(FATAL_ERROR "installing the consumer failed:\n${output}")
endif()
file(GLOB consumer_installed "${PREFIX}/bin/consumer*")
if(NOT consumer_installed)
    message(FATAL_ERROR "the consumer's own program was not installed:\n${output}")
endif()
file(GLOB_RECURSE weft_installed RELATIVE "${PREFIX}" "${PREFIX}/*")
list(FILTER weft_installed INCLUDE REGEX "weft")
if(weft_installed)
    message(FATAL_ERROR "installing the consumer installed weft too (WEFT_INSTALL should be OFF for a "
                        "subproject): ${weft_installed}")
endif()
message(STATUS "the consumer's install holds ${consumer_installed} and nothing of weft")
