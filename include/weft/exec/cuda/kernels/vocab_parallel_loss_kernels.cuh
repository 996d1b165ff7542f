// The vocabulary-parallel cross-entropy's kernels (vocab_parallel_loss.cuh launches them and
// says what they compute between the group's reductions). They compile with a host compiler
// too (device_or_emulated.cuh), and tests/exec/cuda/kernels_emulated_test.cpp runs them on an
// emulated thread block, without a GPU.
#pragma once

#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"

namespace weft::exec::cuda_detail::detail {

constexpr unsigned int vocab_loss_threads = 256;

template <class T>
__global__ void row_max_kernel(const T* logits, float* max, int cols) {
    __shared__ float scratch[32];
    const T* x = logits + std::size_t(blockIdx.x) * std::size_t(cols);
    float m = -CUDART_INF_F;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, to_float(x[c]));
    m = block_max(m, scratch);
    if (threadIdx.x == 0) max[blockIdx.x] = m;
}

template <class T>
__global__ void softmax_partial_sums_kernel(const T* logits, const float* max, const std::int32_t* labels,
                                            int first_column, int cols, int rows, float* sums) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    const T* x = logits + std::size_t(row) * std::size_t(cols);
    const float m = max[row];
    float s = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(to_float(x[c]) - m);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
        const long long column = (long long)labels[row] - first_column;
        sums[row] = s;
        sums[rows + row] = column >= 0 && column < cols ? to_float(x[column]) - m : 0.0f;
    }
}

template <class T>
__global__ void softmax_gradient_kernel(const T* logits, const float* max, const float* sums,
                                        const std::int32_t* labels, int first_column, int cols, float row_scale,
                                        T* d) {
    const int row = blockIdx.x;
    const T* x = logits + std::size_t(row) * std::size_t(cols);
    T* out = d + std::size_t(row) * std::size_t(cols);
    const float m = max[row];
    const float factor = row_scale / sums[row];
    const long long label_column = (long long)labels[row] - first_column;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float g = expf(to_float(x[c]) - m) * factor;
        out[c] = from_float<T>(c == label_column ? g - row_scale : g);
    }
}

WEFT_BEGIN_INLINE_KERNELS

// The group's maxima: all holds `blocks` blocks of n row maxima (the all-gather's), taken in
// block order as the host's max_over_blocks does.
__global__ inline void max_over_blocks_kernel(const float* all, int n, int blocks, float* max) {
    for (int r = int(blockIdx.x * blockDim.x + threadIdx.x); r < n; r += int(gridDim.x * blockDim.x)) {
        float m = all[r];
        for (int q = 1; q < blocks; ++q) {
            const float v = all[std::size_t(q) * std::size_t(n) + std::size_t(r)];
            m = m < v ? v : m;  // std::max's choice: the first of equal values
        }
        max[r] = m;
    }
}

// A row's loss from the group's summed sums: log(sum of exp) - the label's shifted logit.
__global__ inline void loss_terms_kernel(const float* sums, int n, float* terms) {
    for (int r = int(blockIdx.x * blockDim.x + threadIdx.x); r < n; r += int(gridDim.x * blockDim.x))
        terms[r] = logf(sums[r]) - sums[std::size_t(n) + std::size_t(r)];
}

WEFT_END_INLINE_KERNELS

}  // namespace weft::exec::cuda_detail::detail
