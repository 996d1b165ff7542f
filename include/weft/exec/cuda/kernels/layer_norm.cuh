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
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda {

namespace detail {

constexpr int layer_norm_rows_per_block = 8;  // one warp per row

// The rest of a warp's row once each lane has summed its elements (lane, lane + 32, ...):
// the mean, the variance in a second pass (as the CPU backend: no cancellation for large
// means), then y; lane 0 saves the statistics. Each lane reads only its own elements.
template <class T, class P>
__device__ inline void normalize_row(const T* xr, float lane_sum, const P* gamma, const P* beta, T* yr, float* mean,
                                     float* rstd, int row, int cols, float eps) {
    const int lane = threadIdx.x % 32;
    const float mu = warp_sum(lane_sum) / float(cols);
    float squares = 0;
    for (int c = lane; c < cols; c += 32) {
        const float d = to_float(xr[c]) - mu;
        squares += d * d;
    }
    const float rs = rsqrtf(warp_sum(squares) / float(cols) + eps);
    for (int c = lane; c < cols; c += 32)
        yr[c] = from_float<T>((to_float(xr[c]) - mu) * rs * to_float(gamma[c]) + to_float(beta[c]));
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

template <class T, class P>
__global__ void layer_norm_forward_kernel(const T* x, const P* gamma, const P* beta, T* y, float* mean,
                                          float* rstd, int rows, int cols, float eps) {
    const int row = blockIdx.x * layer_norm_rows_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const std::size_t first = std::size_t(row) * cols;
    float sum = 0;
    for (int c = lane; c < cols; c += 32) sum += to_float(x[first + c]);
    normalize_row(x + first, sum, gamma, beta, y + first, mean, rstd, row, cols, eps);
}

// sum = a + b rounded to T, then layer_norm_forward_kernel's arithmetic on the rounded sum
// (what add followed by layer_norm_forward computes), in one pass over memory. Each lane
// reads back only the sums it wrote.
template <class T, class P>
__global__ void residual_layer_norm_forward_kernel(const T* a, const T* b, T* sum_out, const P* gamma, const P* beta,
                                                   T* y, float* mean, float* rstd, int rows, int cols, float eps) {
    const int row = blockIdx.x * layer_norm_rows_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const std::size_t first = std::size_t(row) * cols;
    float sum = 0;
    for (int c = lane; c < cols; c += 32) {
        const T s = from_float<T>(to_float(a[first + c]) + to_float(b[first + c]));
        sum_out[first + c] = s;
        sum += to_float(s);
    }
    normalize_row(sum_out + first, sum, gamma, beta, y + first, mean, rstd, row, cols, eps);
}

template <class T, class P>
__global__ void layer_norm_backward_input_kernel(const T* x, const float* mean, const float* rstd,
                                                 const P* gamma, const T* dy, T* dx, int rows, int cols) {
    const int row = blockIdx.x * layer_norm_rows_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const std::size_t base = std::size_t(row) * cols;
    const float mu = mean[row];
    const float rs = rstd[row];
    float sum_g = 0, sum_gx = 0;
    for (int c = lane; c < cols; c += 32) {
        const float g = to_float(dy[base + c]) * to_float(gamma[c]);
        sum_g += g;
        sum_gx += g * (to_float(x[base + c]) - mu) * rs;
    }
    const float mean_g = warp_sum(sum_g) / float(cols);
    const float mean_gx = warp_sum(sum_gx) / float(cols);
    for (int c = lane; c < cols; c += 32) {
        const float g = to_float(dy[base + c]) * to_float(gamma[c]);
        const float xhat = (to_float(x[base + c]) - mu) * rs;
        dx[base + c] = from_float<T>((g - mean_g - xhat * mean_gx) * rs);
    }
}

// Row r's terms of dgamma and dbeta at element i: dy * xhat and dy (kernels/column_sums.cuh).
template <class T>
struct layer_norm_weight_terms {
    const T* x;
    const float* mean;
    const float* rstd;
    const T* dy;
    __device__ void operator()(int r, std::size_t i, float (&sums)[2]) const {
        const float d = to_float(dy[i]);
        sums[0] += d * (to_float(x[i]) - mean[r]) * rstd[r];
        sums[1] += d;
    }
};

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
    check(cudaGetLastError(), "layer_norm_forward kernel launch");
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
    check(cudaGetLastError(), "residual_layer_norm_forward kernel launch");
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * gamma (written, not accumulated).
template <class T, class P>
void layer_norm_backward_input(const T* x, const float* mean, const float* rstd, const P* gamma, const T* dy, T* dx,
                               int rows, int cols, cudaStream_t stream) {
    detail::require_rows_cols(rows, cols, "layer_norm_backward_input");
    const unsigned int blocks = (rows + detail::layer_norm_rows_per_block - 1) / detail::layer_norm_rows_per_block;
    detail::layer_norm_backward_input_kernel<<<blocks, 32 * detail::layer_norm_rows_per_block, 0, stream>>>(
        x, mean, rstd, gamma, dy, dx, rows, cols);
    check(cudaGetLastError(), "layer_norm_backward_input kernel launch");
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

}  // namespace weft::cuda
