// The kernels of the fused softmax cross-entropy (cross_entropy.cuh launches them and says
// what they compute): one block per row of logits, the max and the sum in one pass over the
// row, then the gradient; and the deterministic mean of the losses. They compile with a host
// compiler too (device_or_emulated.cuh), and tests/exec/cuda/kernels_emulated_test.cpp runs
// them on an emulated thread block against the CPU backend, without a GPU.
#pragma once

#include <math_constants.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"

namespace weft::exec::cuda_detail::detail {

constexpr unsigned int cross_entropy_threads = 256;

// A running softmax denominator: the largest value seen, m, and the sum of exp(x - m). One
// pass over a row gives both, where a max pass then a sum pass read the row twice (the
// LM head's rows are 50k wide: reading them is the kernel's whole cost).
struct running_softmax {
    float m, s;
};

// (Free functions, not member functions or initializers: CUDART_INF_F exists on the device
// only, and the host compiler reads a class's member functions.)
[[nodiscard]] __device__ inline running_softmax no_values() { return {-CUDART_INF_F, 0.0f}; }
__device__ inline void add_value(running_softmax& r, float x) {
    if (x > r.m) {
        r.s = r.s * expf(r.m - x) + 1.0f;  // 0 * 0 + 1 on the first value
        r.m = x;
    } else if (x != -CUDART_INF_F) {  // -inf adds exp(-inf) = 0 (and -inf - -inf would be NaN)
        r.s += expf(x - r.m);         // a NaN value makes s NaN, as it makes the loss
    }
}

// Rows read as 16-byte vectors of T, vector_elements<T> elements each.
template <class T>
constexpr int vector_elements = int(16 / sizeof(T));
template <class T>
struct alignas(16) vector_of {
    T v[vector_elements<T>];
};

// Calls f(c, x) for each column c < classes of the row and its value. Thread t takes the
// vectors (runs of vector_elements<T> columns) t, t + blockDim.x, ..., in column order, on
// either path, so a padded and an unpadded row sum in the same order, bit for bit.
// `Vectorized`: 16-byte loads (the stride a whole number of vectors, the rows 16-byte
// aligned); else one element at a time.
template <bool Vectorized, class T, class F>
__device__ inline void for_each_value(const T* x, int classes, F&& f) {
    constexpr int n = vector_elements<T>;
    const int count = (classes + n - 1) / n;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        if constexpr (Vectorized) {
            const vector_of<T> value = reinterpret_cast<const vector_of<T>*>(x)[i];
#pragma unroll
            for (int k = 0; k < n; ++k)
                if (i * n + k < classes) f(i * n + k, to_float(value.v[k]));
        } else {
            for (int c = i * n; c < i * n + n && c < classes; ++c) f(c, to_float(x[c]));
        }
    }
}

// Rows lie `stride` elements apart (stride >= classes); columns [classes, stride) are padding.
template <bool Vectorized, class T>
__global__ void cross_entropy_kernel(const T* logits, const std::int32_t* labels, float* losses, T* dlogits,
                                     int classes, int stride, float row_scale) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    const T* x = logits + std::size_t(row) * std::size_t(stride);
    running_softmax mine = no_values();
    for_each_value<Vectorized>(x, classes, [&](int, float value) { add_value(mine, value); });
    const float m = block_max(mine.m, scratch);
    // Each thread's sum moved to the row's max. A thread that saw no value (or only -inf) has
    // s = 0 and adds nothing; one that saw only NaNs has m = -inf and s NaN, and passes the NaN on.
    const float s = block_sum(mine.s == 0.0f ? 0.0f : mine.s * expf(mine.m - m), scratch);
    const std::int32_t label = labels[row];
    // A label outside [0, classes) cannot throw from the device: the row's loss and
    // gradient become NaN, which no training run mistakes for a result.
    const bool valid = label >= 0 && label < classes;
    if (threadIdx.x == 0) losses[row] = valid ? logf(s) - (to_float(x[label]) - m) : CUDART_NAN_F;
    if (dlogits == nullptr) return;
    T* d = dlogits + std::size_t(row) * std::size_t(stride);
    const float inv = 1.0f / s;
    const auto gradient = [&](int c, float value) {
        const float p = expf(value - m) * inv;
        return from_float<T>(valid ? (p - (c == label ? 1.0f : 0.0f)) * row_scale : CUDART_NAN_F);
    };
    if constexpr (Vectorized) {
        // Whole vectors out, the padding's exact zeros with them.
        constexpr int n = vector_elements<T>;
        const auto* in = reinterpret_cast<const vector_of<T>*>(x);
        auto* out = reinterpret_cast<vector_of<T>*>(d);
        const int count = (classes + n - 1) / n;
        for (int i = threadIdx.x; i < count; i += blockDim.x) {
            const vector_of<T> value = in[i];
            vector_of<T> grad;
#pragma unroll
            for (int k = 0; k < n; ++k)
                grad.v[k] = i * n + k < classes ? gradient(i * n + k, to_float(value.v[k])) : from_float<T>(0.0f);
            out[i] = grad;
        }
        for (int c = count * n + int(threadIdx.x); c < stride; c += blockDim.x) d[c] = from_float<T>(0.0f);
    } else {
        for (int c = threadIdx.x; c < classes; c += blockDim.x) d[c] = gradient(c, to_float(x[c]));
        // Padding gets an exact zero gradient, so GEMMs over the padded width add nothing.
        for (int c = classes + int(threadIdx.x); c < stride; c += blockDim.x) d[c] = from_float<T>(0.0f);
    }
}

constexpr unsigned int mean_threads = 1024;

WEFT_BEGIN_INLINE_KERNELS

// One block, strided partial sums in a fixed order, then the fixed block tree. The bound
// keeps the compiler within the registers that 1,024 threads in one block may use.
__global__ inline void __launch_bounds__(mean_threads) mean_kernel(const float* values, int n, float* out) {
    __shared__ float scratch[32];
    float sum = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) *out = sum / float(n);
}

WEFT_END_INLINE_KERNELS

}  // namespace weft::exec::cuda_detail::detail
