# package_cuda_architectures_guard: a target that the generate step would refuse for an empty
# CUDA_ARCHITECTURES fails the configure instead, naming the target, and no Makefile is
# written (the generate step's error came after the Makefiles, which still built the tests).
#   cmake -DWEFT_SOURCE_DIR=... -DBINARY_DIR=... -P cuda_architectures_guard.cmake
foreach(var WEFT_SOURCE_DIR BINARY_DIR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "cuda_architectures_guard.cmake: -D${var}=... is required")
    endif()
endforeach()
file(REMOVE_RECURSE "${BINARY_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/cuda_architectures" -B "${BINARY_DIR}"
                        -G "Unix Makefiles" "-DWEFT_SOURCE_DIR=${WEFT_SOURCE_DIR}"
                OUTPUT_VARIABLE output ERROR_VARIABLE output RESULT_VARIABLE status)
if(status EQUAL 0)
    message(FATAL_ERROR "a target with no CUDA architectures configured and generated:\n${output}")
endif()
# CMake wraps the message's lines.
string(REGEX REPLACE "[ \n]+" " " flat "${output}")
if(NOT flat MATCHES "CUDA_ARCHITECTURES is empty for target\\(s\\) host_first: each was created before")
    message(FATAL_ERROR "the configure failed, but not with weft's message naming host_first:\n${output}")
endif()
if(EXISTS "${BINARY_DIR}/Makefile" OR output MATCHES "Generating done")
    message(FATAL_ERROR "the error came at generate time: build files were written:\n${output}")
endif()
message(STATUS "refused at configure time, nothing generated")
