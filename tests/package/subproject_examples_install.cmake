# package_subproject_examples_install: a parent project that adds weft with
# WEFT_BUILD_EXAMPLES=ON installs its own files and nothing of weft: no header, no package
# and no example program (weft's install rules, the examples' included, follow WEFT_INSTALL,
# off for a subproject). Configure and install only: nothing is compiled.
#
#   cmake -DWEFT_SOURCE_DIR=... -DBINARY_DIR=... -DPREFIX=... -DGENERATOR=... -P subproject_examples_install.cmake
foreach(var WEFT_SOURCE_DIR BINARY_DIR PREFIX GENERATOR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "subproject_examples_install.cmake: -D${var}=... is required")
    endif()
endforeach()
file(REMOVE_RECURSE "${BINARY_DIR}" "${PREFIX}")
include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)
run_or_fail("configuring the parent" "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/subproject_examples"
            -B "${BINARY_DIR}" -G "${GENERATOR}" "-DWEFT_SOURCE_DIR=${WEFT_SOURCE_DIR}")
run_or_fail("installing the parent" "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${PREFIX}")
if(NOT EXISTS "${PREFIX}/share/parent/CMakeLists.txt")
    message(FATAL_ERROR "the parent's own file was not installed:\n${output}")
endif()
file(GLOB_RECURSE installed RELATIVE "${PREFIX}" "${PREFIX}/*")
list(REMOVE_ITEM installed share/parent/CMakeLists.txt)
if(installed)
    message(FATAL_ERROR "the parent's install holds weft's files too (WEFT_INSTALL should be OFF for a subproject, "
                        "the examples' install rules included): ${installed}")
endif()
message(STATUS "the parent's install holds its own file and nothing of weft, with weft's examples on")
