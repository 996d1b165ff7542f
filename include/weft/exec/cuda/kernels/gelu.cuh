// GELU in GPT-2's tanh form, forward and backward, elementwise over float or bf16
// storage with fp32 arithmetic (same formula as the CPU backend).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda {

namespace detail {

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

}  // namespace detail

template <class T>
void gelu_forward(const T* x, T* y, std::size_t n, cudaStream_t stream) {
    if (n == 0) return;
    constexpr unsigned int threads = 256;
    detail::gelu_forward_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(x, y, n);
    check(cudaGetLastError(), "gelu_forward kernel launch");
}

// dx = dy * gelu'(x); x is the forward's input.
template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::size_t n, cudaStream_t stream) {
    if (n == 0) return;
    constexpr unsigned int threads = 256;
    detail::gelu_backward_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(x, dy, dx, n);
    check(cudaGetLastError(), "gelu_backward kernel launch");
}

}  // namespace weft::cuda
