// GELU's kernels (gelu.cuh launches them), forward and backward, grid-stride loops.
// They compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block, without a
// GPU.
#pragma once

#include <cstddef>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"

namespace weft::exec::cuda_detail::detail {

constexpr float gelu_k = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float gelu_c = 0.044715f;

template <class T>
__global__ void gelu_forward_kernel(const T* x, T* y, std::size_t n) {
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const float v = to_float(x[i]);
        y[i] = from_float<T>(0.5f * v * (1.0f + tanhf(gelu_k * (v + gelu_c * v * v * v))));
    }
}

template <class T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, std::size_t n) {
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const float v = to_float(x[i]);
        const float t = tanhf(gelu_k * (v + gelu_c * v * v * v));
        const float dt = (1.0f - t * t) * gelu_k * (1.0f + 3.0f * gelu_c * v * v);
        dx[i] = from_float<T>(to_float(dy[i]) * (0.5f * (1.0f + t) + 0.5f * v * dt));
    }
}

}  // namespace weft::exec::cuda_detail::detail
