// The residual connection's kernel (residual_add.cuh launches it), a grid-stride loop.
// It compiles with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs it on an emulated thread block, without a
// GPU.
#pragma once

#include <cstddef>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"

namespace weft::exec::cuda_detail::detail {

template <class T>
__global__ void residual_add_kernel(const T* a, const T* b, T* out, std::size_t n) {
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x)
        out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

}  // namespace weft::exec::cuda_detail::detail
