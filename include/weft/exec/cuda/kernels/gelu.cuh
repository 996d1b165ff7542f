// GELU in GPT-2's tanh form, forward and backward, elementwise over float or bf16
// storage with fp32 arithmetic (same formula as the CPU backend).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/gelu_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

template <class T>
void gelu_forward(const T* x, T* y, std::size_t n, cudaStream_t stream) {
    if (n == 0) return;
    constexpr unsigned int threads = 256;
    detail::gelu_forward_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(x, y, n);
    gpu::check(cudaGetLastError(), "gelu_forward kernel launch");
}

// dx = dy * gelu'(x); x is the forward's input.
template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::size_t n, cudaStream_t stream) {
    if (n == 0) return;
    constexpr unsigned int threads = 256;
    detail::gelu_backward_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(x, dy, dx, n);
    gpu::check(cudaGetLastError(), "gelu_backward kernel launch");
}

}  // namespace weft::exec::cuda_detail
