// Thin, checked access to the CUDA runtime: device discovery that reports "no GPU"
// as zero devices rather than an error, and a check() that turns any other CUDA
// failure into a weft::error naming the call. Link weft::cuda to use it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>
#include <utility>

#include "weft/core/error.hpp"

namespace weft::gpu {

// Throws weft::error("<what> failed: <CUDA's name and text>") unless `status` is success.
inline void check(cudaError_t status, std::string_view what) {
    if (status == cudaSuccess) return;
    throw error(std::string(what) + " failed: " + cudaGetErrorName(status) + " (" +
                cudaGetErrorString(status) + ")");
}

// Number of usable GPUs; 0 on a machine without a GPU or without a driver, so that
// callers can fall back to the CPU backend (tests skip) instead of failing.
[[nodiscard]] inline int device_count() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
        status == cudaErrorInitializationError || status == cudaErrorNotSupported) {
        cudaGetLastError();  // clear the sticky error so later calls start clean
        return 0;
    }
    check(status, "cudaGetDeviceCount");
    return count;
}

[[nodiscard]] inline std::string device_name(int device) {
    const int count = device_count();
    require(device >= 0 && device < count, "device", device,
            "must be in [0, " + std::to_string(count) + ") on this machine");
    cudaDeviceProp properties{};
    check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
    return properties.name;
}

// The kind of memory `p` points at (cudaMemoryTypeDevice, cudaMemoryTypeManaged, ...);
// cudaMemoryTypeUnregistered for plain host memory, a null pointer, or a machine without a
// GPU or driver (whose pointers are all host memory).
[[nodiscard]] inline cudaMemoryType memory_type(const void* p) {
    if (p == nullptr) return cudaMemoryTypeUnregistered;
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
        static_cast<void>(cudaGetLastError());  // clear the sticky error so later calls start clean
        return cudaMemoryTypeUnregistered;
    }
    return attributes.type;
}

// CUDA runtime version as (major, minor), e.g. (13, 0).
[[nodiscard]] inline std::pair<int, int> runtime_version() {
    int version = 0;
    check(cudaRuntimeGetVersion(&version), "cudaRuntimeGetVersion");
    return {version / 1000, (version % 1000) / 10};
}

}  // namespace weft::gpu
