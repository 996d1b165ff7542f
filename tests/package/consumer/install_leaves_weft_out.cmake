# Installs the consumer (weft added with add_subdirectory) into PREFIX: the consumer's program
# is there and nothing of weft is (headers, CMake package, weft.pc).
#   cmake -DBINARY_DIR=... -DPREFIX=... -P install_leaves_weft_out.cmake
file(REMOVE_RECURSE "${PREFIX}")
include(${CMAKE_CURRENT_LIST_DIR}/../run_or_fail.cmake)
run_or_fail("installing the consumer" "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${PREFIX}")
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
