# package_generators: weft configures as a user first configures it, with either generator,
# on a machine with the CUDA toolkit, and installs without a build.
#   - `cmake -S . -B build -DCMAKE_BUILD_TYPE=Release`, the default Unix Makefiles generator
#     and default options: it used to stop at generate time ("CUDA_ARCHITECTURES is empty for
#     target train_gpt") where Ninja passed;
#   - warnings are not errors by default (no -Werror in any of its flags), but are with
#     WEFT_WARNINGS_AS_ERRORS=ON, as the presets and CI set it (the Ninja configure);
#   - `cmake --install` of the Makefiles tree, nothing built: the headers, the CMake package
#     and weft.pc are installed, and programs that were not built are skipped.
#
#   cmake -DWEFT_SOURCE_DIR=... -DBINARY_DIR=... -DEXPECT_CUDA=ON|OFF -P generators.cmake
foreach(var WEFT_SOURCE_DIR BINARY_DIR EXPECT_CUDA)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "generators.cmake: -D${var}=... is required")
    endif()
endforeach()
file(REMOVE_RECURSE "${BINARY_DIR}")
include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

function(configure_weft generator dir)
    run_or_fail("configure with ${generator} ${ARGN}" "${CMAKE_COMMAND}" -S "${WEFT_SOURCE_DIR}" -B "${dir}"
                -G "${generator}" -DCMAKE_BUILD_TYPE=Release ${ARGN})
    # Where the outer build found the CUDA toolkit, this one must too, or the test would not
    # reach what it is for.
    if(EXPECT_CUDA AND NOT output MATCHES "weft: MPI [A-Z]+, CUDA ON")
        message(FATAL_ERROR "configure with ${generator} did not find the CUDA toolkit:\n${output}")
    endif()
endfunction()

# ---- Unix Makefiles, the options as they come -----------------------------------------------
set(make_dir "${BINARY_DIR}/makefiles")
configure_weft("Unix Makefiles" "${make_dir}")
if(NOT EXISTS "${make_dir}/Makefile")
    message(FATAL_ERROR "Unix Makefiles: the configure succeeded but wrote no Makefile")
endif()
file(GLOB_RECURSE flag_files "${make_dir}/*/flags.make")
if(NOT flag_files)
    message(FATAL_ERROR "Unix Makefiles: no target's flags.make to read (no targets configured?)")
endif()
foreach(file IN LISTS flag_files)
    file(STRINGS "${file}" werror REGEX "-Werror")
    if(werror)
        message(FATAL_ERROR "a default configure treats warnings as errors, which is for the presets "
                            "and CI only (WEFT_WARNINGS_AS_ERRORS=ON): ${file}:\n${werror}")
    endif()
endforeach()

set(prefix "${BINARY_DIR}/installed")
run_or_fail("cmake --install without a build" "${CMAKE_COMMAND}" --install "${make_dir}" --prefix "${prefix}")
foreach(file include/weft/weft.hpp lib/cmake/weft/weftConfig.cmake share/pkgconfig/weft.pc)
    if(NOT EXISTS "${prefix}/${file}")
        message(FATAL_ERROR "cmake --install without a build did not install ${file}:\n${output}")
    endif()
endforeach()

# ---- Ninja, warnings as errors (as the presets configure) ------------------------------------
set(ninja_dir "${BINARY_DIR}/ninja")
configure_weft(Ninja "${ninja_dir}" -DWEFT_WARNINGS_AS_ERRORS=ON)
file(STRINGS "${ninja_dir}/build.ninja" werror REGEX "FLAGS = .*-Werror" LIMIT_COUNT 1)
if(NOT werror)
    message(FATAL_ERROR "Ninja with WEFT_WARNINGS_AS_ERRORS=ON: no target compiles with -Werror")
endif()
message(STATUS "Unix Makefiles and Ninja configured, no -Werror by default, installed without a build")
