// The three passes of the vocabulary-parallel cross-entropy (exec/softmax_rows.hpp, on the
// GPU), one block per row of this rank's logits [rows, cols], the columns
// [first_column, first_column + cols) of the vocabulary: the row maxima, then each row's sum
// of exp(logit - max) and its label's shifted logit, then the gradient. Between the passes
// the caller reduces the per-row scalars over the tensor-parallel group, so the logits never
// leave the GPU. Sums run in the fixed block tree of reduce.cuh (bit-reproducible). Also the
// steps between the passes where the reductions stay on the GPU (exec::cuda's
// vocab_parallel_cross_entropy): the maxima of the gathered blocks, and each row's loss.
#pragma once

#include <cuda_runtime_api.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda {

namespace detail {

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

inline void check_rows(int rows, int cols, const char* what) {
    require(rows > 0, std::string(what) + ": rows", rows, "must be positive");
    require(cols > 0, std::string(what) + ": cols", cols, "must be positive");
}

}  // namespace detail

// max[r] = the largest logit of row r.
template <class T>
void row_max(const T* logits, float* max, int rows, int cols, cudaStream_t stream) {
    detail::check_rows(rows, cols, "row_max");
    detail::row_max_kernel<T><<<rows, detail::vocab_loss_threads, 0, stream>>>(logits, max, cols);
    check(cudaGetLastError(), "row_max kernel launch");
}

// sums[r] = sum of exp(logit - max[r]) over row r; sums[rows + r] = row r's label's logit less
// max[r] when the columns hold the label, else 0. sums holds 2 * rows floats.
template <class T>
void softmax_partial_sums(const T* logits, const float* max, const std::int32_t* labels, int first_column, float* sums,
                          int rows, int cols, cudaStream_t stream) {
    detail::check_rows(rows, cols, "softmax_partial_sums");
    detail::softmax_partial_sums_kernel<T><<<rows, detail::vocab_loss_threads, 0, stream>>>(
        logits, max, labels, first_column, cols, rows, sums);
    check(cudaGetLastError(), "softmax_partial_sums kernel launch");
}

// d = exp(logit - max) * (row_scale / sums[r]), less row_scale at the label's column.
template <class T>
void softmax_gradient(const T* logits, const float* max, const float* sums, const std::int32_t* labels,
                      int first_column, float row_scale, T* d, int rows, int cols, cudaStream_t stream) {
    detail::check_rows(rows, cols, "softmax_gradient");
    detail::softmax_gradient_kernel<T><<<rows, detail::vocab_loss_threads, 0, stream>>>(
        logits, max, sums, labels, first_column, cols, row_scale, d);
    check(cudaGetLastError(), "softmax_gradient kernel launch");
}

// max[r] = the largest of all[q * n + r] over q in [0, blocks).
inline void max_over_blocks(const float* all, int n, int blocks, float* max, cudaStream_t stream) {
    detail::check_rows(n, blocks, "max_over_blocks");
    detail::max_over_blocks_kernel<<<detail::elementwise_blocks(std::size_t(n), 256), 256, 0, stream>>>(all, n, blocks,
                                                                                                       max);
    check(cudaGetLastError(), "max_over_blocks kernel launch");
}

// terms[r] = log(sums[r]) - sums[n + r]: each row's loss, whose mean is the loss.
inline void loss_terms(const float* sums, int n, float* terms, cudaStream_t stream) {
    detail::check_rows(n, 1, "loss_terms");
    detail::loss_terms_kernel<<<detail::elementwise_blocks(std::size_t(n), 256), 256, 0, stream>>>(sums, n, terms);
    check(cudaGetLastError(), "loss_terms kernel launch");
}

}  // namespace weft::cuda
