// LayerNorm's kernels (layer_norm.cuh launches them): forward, its residual form and the
// input's backward, a warp per row; the weight gradient's terms, which the column sums add
// (column_sums_kernels.cuh). They compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block, without a
// GPU.
#pragma once

#include <cstddef>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"

namespace weft::exec::cuda_detail::detail {

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

}  // namespace weft::exec::cuda_detail::detail
