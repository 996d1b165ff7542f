# The CUDA language for weft's .cu tests and benchmarks, shared by every directory
# that builds them (enable_language has to run in each such directory's scope).
#
#   weft_enable_cuda_language(<result-var>)   sets <result-var> to TRUE when nvcc was
#                                             found and CUDA enabled here, FALSE otherwise
#   weft_cuda_executable(<target> <sources>...)  a .cu executable with weft's settings
#   weft_check_cuda_architectures(<directory>)   fails the configure when a target under
#                                             <directory> would fail the generate step for
#                                             an empty CUDA_ARCHITECTURES
#
# .cu targets do not link weft_project_options' compile flags: nvcc rejects -Wpedantic
# and compiles its own generated host stubs with whatever it is given. Host warnings reach
# the host compiler through -Xcompiler instead; with WEFT_WARNINGS_AS_ERRORS (the presets')
# nvcc's own warnings and the host compiler's are errors.

include(CheckLanguage)

# A macro, not a function: enable_language must run in the calling directory's scope.
macro(weft_enable_cuda_language result)
    set(${result} FALSE)
    # CMake finds nvcc on PATH, or where FindCUDAToolkit saw it.
    if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND CUDAToolkit_NVCC_EXECUTABLE)
        set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
    endif()
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
        # CMAKE_CUDA_ARCHITECTURES comes from the top-level CMakeLists.txt, which sets it
        # before any target exists (a target created before this call takes it too).
        enable_language(CUDA)
        set(${result} TRUE)
    endif()
endmacro()

function(weft_cuda_executable target)
    add_executable(${target} ${ARGN})
    # Shared cudart: weft::cuda links CUDA::cudart, and one process should hold one runtime.
    set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                               CUDA_RUNTIME_LIBRARY Shared)
    weft_cuda_target_options(${target})
    target_link_libraries(${target} PRIVATE weft::cuda $<LINK_ONLY:weft_project_options>)
endfunction()

# C++20 and the warning flags for a target with .cu sources.
function(weft_cuda_target_options target)
    # CMake before 3.26 has no CUDA20 dialect for nvcc, so the flag is given by hand there.
    if("cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
        set_target_properties(${target} PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
    else()
        target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
    endif()
    target_compile_options(${target} PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
        $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${WEFT_WARNINGS_AS_ERRORS}>>:--Werror=all-warnings -Xcompiler=-Werror>)
endfunction()

# exec::cuda's kernels (weft/exec/cuda/backend_kernels.cu) compiled once for all of weft's
# own targets, as an object library they link (users link weft::cuda_backend instead, which
# compiles the file into their target). Call after weft_enable_cuda_language succeeded.
function(weft_cuda_backend_kernels)
    if(TARGET weft_cuda_backend_kernels)
        return()
    endif()
    add_library(weft_cuda_backend_kernels OBJECT ${PROJECT_SOURCE_DIR}/include/weft/exec/cuda/backend_kernels.cu)
    set_target_properties(weft_cuda_backend_kernels PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                                               CUDA_RUNTIME_LIBRARY Shared)
    weft_cuda_target_options(weft_cuda_backend_kernels)
    target_link_libraries(weft_cuda_backend_kernels PUBLIC weft::cuda)
endfunction()

# With CUDA enabled, the generate step refuses a target that compiles or links nvcc's code with
# an empty CUDA_ARCHITECTURES ("CUDA_ARCHITECTURES is empty for target ..."): a target takes the
# property from CMAKE_CUDA_ARCHITECTURES when it is created, so one created before that was set
# has none. The generate step has by then written build files, and the directories' Makefiles
# still build (make -C tests); a configure error writes none. So every target under
# <directory> (with its subdirectories) that can hold code is checked here, by name.
function(weft_check_cuda_architectures directory)
    get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
    if(NOT "CUDA" IN_LIST languages)
        return()
    endif()
    set(missing)
    set(directories ${directory})
    while(directories)
        list(POP_FRONT directories current)
        get_property(subdirectories DIRECTORY ${current} PROPERTY SUBDIRECTORIES)
        list(APPEND directories ${subdirectories})
        get_property(targets DIRECTORY ${current} PROPERTY BUILDSYSTEM_TARGETS)
        foreach(target IN LISTS targets)
            get_target_property(type ${target} TYPE)
            if(type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
                continue()
            endif()
            get_target_property(architectures ${target} CUDA_ARCHITECTURES)
            if(architectures STREQUAL "" OR architectures MATCHES "-NOTFOUND$")
                list(APPEND missing ${target})
            endif()
        endforeach()
    endwhile()
    if(missing)
        list(JOIN missing ", " names)
        message(FATAL_ERROR "CUDA_ARCHITECTURES is empty for target(s) ${names}: each was created before "
                            "CMAKE_CUDA_ARCHITECTURES was set. Set it (e.g. 90, or native) before the first "
                            "target, as weft's top-level CMakeLists.txt does, or on the target.")
    endif()
endfunction()
