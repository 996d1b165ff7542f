// Softmax cross-entropy fused forward+backward, one block per row of logits [rows,
// classes]: per-row losses, dlogits = scale/rows (softmax - onehot), and a
// deterministic mean of the losses (the CPU backend's cross_entropy, on the GPU).
#pragma once

#include <cuda_runtime_api.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda {

namespace detail {

constexpr unsigned int cross_entropy_threads = 256;

// Rows lie `stride` elements apart (stride >= classes); columns [classes, stride) are padding.
template <class T>
__global__ void cross_entropy_kernel(const T* logits, const std::int32_t* labels, float* losses, T* dlogits,
                                     int classes, int stride, float row_scale) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    const T* x = logits + std::size_t(row) * std::size_t(stride);
    float m = -CUDART_INF_F;
    for (int c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, to_float(x[c]));
    m = block_max(m, scratch);
    float s = 0;
    for (int c = threadIdx.x; c < classes; c += blockDim.x) s += expf(to_float(x[c]) - m);
    s = block_sum(s, scratch);
    const std::int32_t label = labels[row];
    // A label outside [0, classes) cannot throw from the device: the row's loss and
    // gradient become NaN, which no training run mistakes for a result.
    const bool valid = label >= 0 && label < classes;
    if (threadIdx.x == 0) losses[row] = valid ? logf(s) - (to_float(x[label]) - m) : CUDART_NAN_F;
    if (dlogits == nullptr) return;
    T* d = dlogits + std::size_t(row) * std::size_t(stride);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < classes; c += blockDim.x) {
        const float p = expf(to_float(x[c]) - m) * inv;
        d[c] = from_float<T>(valid ? (p - (c == label ? 1.0f : 0.0f)) * row_scale : CUDART_NAN_F);
    }
    // Padding gets an exact zero gradient, so GEMMs over the padded width add nothing.
    for (int c = classes + int(threadIdx.x); c < stride; c += blockDim.x) d[c] = from_float<T>(0.0f);
}

constexpr unsigned int mean_threads = 1024;

// One block, strided partial sums in a fixed order, then the fixed block tree. The bound
// keeps the compiler within the registers that 1,024 threads in one block may use.
__global__ inline void __launch_bounds__(mean_threads) mean_kernel(const float* values, int n, float* out) {
    __shared__ float scratch[32];
    float sum = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) *out = sum / float(n);
}

}  // namespace detail

// losses[r] = -log softmax(logits[r])[labels[r]]; when dlogits is not null it is
// written with scale * d(mean loss)/d(logits). A label outside [0, classes) yields NaN.
// Rows of logits and dlogits lie `stride` >= classes elements apart: a vocabulary padded
// to an aligned width for the GEMMs, whose padding columns are ignored here and get a
// zero gradient.
template <class T>
void cross_entropy_forward_backward(const T* logits, const std::int32_t* labels, float* losses, T* dlogits, int rows,
                                    int classes, int stride, float scale, cudaStream_t stream) {
    require(rows > 0, "cross_entropy: rows", rows, "must be positive");
    require(classes > 0, "cross_entropy: classes", classes, "must be positive");
    require(stride >= classes, "cross_entropy: stride", stride,
            "must be at least classes = " + std::to_string(classes));
    detail::cross_entropy_kernel<<<rows, detail::cross_entropy_threads, 0, stream>>>(
        logits, labels, losses, dlogits, classes, stride, scale / float(rows));
    check(cudaGetLastError(), "cross_entropy kernel launch");
}

// Unpadded rows (stride = classes).
template <class T>
void cross_entropy_forward_backward(const T* logits, const std::int32_t* labels, float* losses, T* dlogits, int rows,
                                    int classes, float scale, cudaStream_t stream) {
    cross_entropy_forward_backward(logits, labels, losses, dlogits, rows, classes, classes, scale, stream);
}

// *out = mean of values[0, n), summed in a fixed order (bit-reproducible).
inline void mean(const float* values, int n, float* out, cudaStream_t stream) {
    require(n > 0, "mean: n", n, "must be positive");
    detail::mean_kernel<<<1, detail::mean_threads, 0, stream>>>(values, n, out);
    check(cudaGetLastError(), "mean kernel launch");
}

}  // namespace weft::cuda
