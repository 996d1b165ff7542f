// LayerNorm on the GPU: forward saving per-row mean and rstd, backward for the input
// and (separately, like the CPU backend's split backward) for weight and bias, the latter
// as column sums (kernels/column_sums.cuh).
// Storage is float or bf16, arithmetic fp32; weight/bias grads accumulate in fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/column_sums.cuh"
#include "weft/exec/cuda/kernels/layer_norm_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

namespace detail {

inline void require_rows_cols(int rows, int cols, const char* what) {
    require(rows > 0, std::string(what) + ": rows", rows, "must be positive");
    require(cols > 0, std::string(what) + ": cols", cols, "must be positive");
}

}  // namespace detail

// y = (x - mean) * rstd * gamma + beta per row of x [rows, cols]; mean and rstd [rows] are saved.
template <class T, class P>
void layer_norm_forward(const T* x, const P* gamma, const P* beta, T* y, float* mean, float* rstd, int rows,
                        int cols, float eps, cudaStream_t stream) {
    detail::require_rows_cols(rows, cols, "layer_norm_forward");
    require(eps > 0, "layer_norm_forward: eps", eps, "must be positive");
    const unsigned int blocks = (rows + detail::layer_norm_rows_per_block - 1) / detail::layer_norm_rows_per_block;
    detail::layer_norm_forward_kernel<<<blocks, 32 * detail::layer_norm_rows_per_block, 0, stream>>>(
        x, gamma, beta, y, mean, rstd, rows, cols, eps);
    gpu::check(cudaGetLastError(), "layer_norm_forward kernel launch");
}

// sum = a + b, then y = layer_norm_forward(sum): the residual connection and the LayerNorm
// after it in one kernel.
template <class T, class P>
void residual_layer_norm_forward(const T* a, const T* b, T* sum, const P* gamma, const P* beta, T* y, float* mean,
                                 float* rstd, int rows, int cols, float eps, cudaStream_t stream) {
    detail::require_rows_cols(rows, cols, "residual_layer_norm_forward");
    require(eps > 0, "residual_layer_norm_forward: eps", eps, "must be positive");
    const unsigned int blocks = (rows + detail::layer_norm_rows_per_block - 1) / detail::layer_norm_rows_per_block;
    detail::residual_layer_norm_forward_kernel<<<blocks, 32 * detail::layer_norm_rows_per_block, 0, stream>>>(
        a, b, sum, gamma, beta, y, mean, rstd, rows, cols, eps);
    gpu::check(cudaGetLastError(), "residual_layer_norm_forward kernel launch");
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * gamma (written, not accumulated).
template <class T, class P>
void layer_norm_backward_input(const T* x, const float* mean, const float* rstd, const P* gamma, const T* dy, T* dx,
                               int rows, int cols, cudaStream_t stream) {
    detail::require_rows_cols(rows, cols, "layer_norm_backward_input");
    const unsigned int blocks = (rows + detail::layer_norm_rows_per_block - 1) / detail::layer_norm_rows_per_block;
    detail::layer_norm_backward_input_kernel<<<blocks, 32 * detail::layer_norm_rows_per_block, 0, stream>>>(
        x, mean, rstd, gamma, dy, dx, rows, cols);
    gpu::check(cudaGetLastError(), "layer_norm_backward_input kernel launch");
}

// dgamma += sum over rows of dy * xhat, dbeta += sum over rows of dy (fp32 accumulators).
// `partials`: column_sum_scratch_floats(rows, cols, 2) floats of device scratch.
template <class T>
void layer_norm_backward_weight(const T* x, const float* mean, const float* rstd, const T* dy, float* dgamma,
                                float* dbeta, float* partials, int rows, int cols, cudaStream_t stream) {
    detail::require_rows_cols(rows, cols, "layer_norm_backward_weight");
    detail::column_sums<2>(detail::layer_norm_weight_terms<T>{x, mean, rstd, dy}, partials,
                           detail::column_outputs<2>{{dgamma, dbeta}}, rows, cols, stream,
                           "layer_norm_backward_weight");
}

}  // namespace weft::exec::cuda_detail
