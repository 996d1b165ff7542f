# package_cuda_without_nccl: weft's CUDA parts configure and build where the CUDA toolkit is
# and NCCL is not (CUDA from Python wheels, say: the GPU check's machine may be one), with
# WEFT_ENABLE_NCCL=OFF standing in for NCCL's absence. exec::cuda and comm::host_staged need
# no NCCL, so weft::cuda must still be there and its tests must build; weft::nccl must not.
#
#   cmake -DWEFT_SOURCE_DIR=... -DBINARY_DIR=... -DGENERATOR=... -P cuda_without_nccl.cmake
foreach(var WEFT_SOURCE_DIR BINARY_DIR GENERATOR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "cuda_without_nccl.cmake: -D${var}=... is required")
    endif()
endforeach()

file(REMOVE_RECURSE "${BINARY_DIR}")
execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${WEFT_SOURCE_DIR}" -B "${BINARY_DIR}" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
            -DWEFT_ENABLE_NCCL=OFF -DWEFT_ENABLE_MPI=OFF -DWEFT_ENABLE_ZMQ=OFF -DWEFT_BUILD_EXAMPLES=OFF
            -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_BUILD_UNIT_TESTS=OFF -DWEFT_WARNINGS_AS_ERRORS=ON
    OUTPUT_VARIABLE configure_output ERROR_VARIABLE configure_output RESULT_VARIABLE configure_status)
if(NOT configure_status EQUAL 0)
    message(FATAL_ERROR "configure without NCCL failed:\n${configure_output}")
endif()
if(NOT configure_output MATCHES "weft: MPI OFF, CUDA ON, NCCL OFF")
    message(FATAL_ERROR "without NCCL, weft::cuda should still be provided and weft::nccl not; "
                        "the configure said:\n${configure_output}")
endif()

# The runtime's test (its NCCL part left out) and host staging, which is how ranks share
# device memory without NCCL.
execute_process(
    COMMAND "${CMAKE_COMMAND}" --build "${BINARY_DIR}" --target test_cuda_runtime test_comm_host_staged
    OUTPUT_VARIABLE build_output ERROR_VARIABLE build_output RESULT_VARIABLE build_status)
if(NOT build_status EQUAL 0)
    message(FATAL_ERROR "building the CUDA tests without NCCL failed:\n${build_output}")
endif()

# It runs: 77 without a GPU (as every GPU test), 0 with one; either way it says that it was
# built without NCCL, which is the part compiled differently here.
execute_process(COMMAND "${BINARY_DIR}/tests/exec/cuda/test_cuda_runtime"
                OUTPUT_VARIABLE run_output ERROR_VARIABLE run_output RESULT_VARIABLE run_status)
if(NOT (run_status EQUAL 0 OR run_status EQUAL 77) OR NOT run_output MATCHES "built without NCCL")
    message(FATAL_ERROR "test_cuda_runtime built without NCCL exited ${run_status}:\n${run_output}")
endif()
message(STATUS "CUDA without NCCL: configured, built and ran (exit ${run_status})")
