# package_header_only_install: weft installed as docs/building.md says, with nothing compiled:
# configure with the tests, examples and benchmarks off, then cmake --install. Every header
# of include/weft/ is installed, with the CMake package and weft.pc, and the configured tree
# has nothing to compile (a build of it makes no object file). The consumer tests
# (package_pkg_config_*) use what it installs.
#
#   cmake -DWEFT_SOURCE_DIR=... -DBINARY_DIR=... -DPREFIX=... -DGENERATOR=... -P header_only_install.cmake
foreach(var WEFT_SOURCE_DIR BINARY_DIR PREFIX GENERATOR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "header_only_install.cmake: -D${var}=... is required")
    endif()
endforeach()
file(REMOVE_RECURSE "${BINARY_DIR}" "${PREFIX}")
include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

run_or_fail("header-only configure" "${CMAKE_COMMAND}" -S "${WEFT_SOURCE_DIR}" -B "${BINARY_DIR}" -G "${GENERATOR}"
            -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_BUILD_BENCHMARKS=OFF)
run_or_fail("header-only install" "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${PREFIX}")

file(GLOB_RECURSE source_headers RELATIVE "${WEFT_SOURCE_DIR}/include" "${WEFT_SOURCE_DIR}/include/weft/*")
file(GLOB_RECURSE installed_headers RELATIVE "${PREFIX}/include" "${PREFIX}/include/weft/*")
list(SORT source_headers)
list(SORT installed_headers)
if(NOT source_headers STREQUAL installed_headers)
    set(absent ${source_headers})
    list(REMOVE_ITEM absent ${installed_headers})
    message(FATAL_ERROR "the install does not hold include/weft/ as it is; not installed: ${absent}")
endif()
foreach(file lib/cmake/weft/weftConfig.cmake lib/cmake/weft/weftConfigVersion.cmake share/pkgconfig/weft.pc)
    if(NOT EXISTS "${PREFIX}/${file}")
        message(FATAL_ERROR "the header-only install has no ${file}:\n${output}")
    endif()
endforeach()

execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BINARY_DIR}"
                OUTPUT_VARIABLE output ERROR_VARIABLE output RESULT_VARIABLE status)
file(GLOB_RECURSE objects "${BINARY_DIR}/*.o" "${BINARY_DIR}/*.obj")
if(NOT status EQUAL 0 OR objects)
    message(FATAL_ERROR "a header-only configure should compile nothing; its build (exit ${status}) made "
                        "${objects}:\n${output}")
endif()
list(LENGTH installed_headers count)
message(STATUS "header-only install: ${count} files of include/weft/, weftConfig.cmake and weft.pc, nothing compiled")
