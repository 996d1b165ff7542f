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

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/vocab_parallel_loss_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

namespace detail {

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
    gpu::check(cudaGetLastError(), "row_max kernel launch");
}

// sums[r] = sum of exp(logit - max[r]) over row r; sums[rows + r] = row r's label's logit less
// max[r] when the columns hold the label, else 0. sums holds 2 * rows floats.
template <class T>
void softmax_partial_sums(const T* logits, const float* max, const std::int32_t* labels, int first_column, float* sums,
                          int rows, int cols, cudaStream_t stream) {
    detail::check_rows(rows, cols, "softmax_partial_sums");
    detail::softmax_partial_sums_kernel<T><<<rows, detail::vocab_loss_threads, 0, stream>>>(
        logits, max, labels, first_column, cols, rows, sums);
    gpu::check(cudaGetLastError(), "softmax_partial_sums kernel launch");
}

// d = exp(logit - max) * (row_scale / sums[r]), less row_scale at the label's column.
template <class T>
void softmax_gradient(const T* logits, const float* max, const float* sums, const std::int32_t* labels,
                      int first_column, float row_scale, T* d, int rows, int cols, cudaStream_t stream) {
    detail::check_rows(rows, cols, "softmax_gradient");
    detail::softmax_gradient_kernel<T><<<rows, detail::vocab_loss_threads, 0, stream>>>(
        logits, max, sums, labels, first_column, cols, row_scale, d);
    gpu::check(cudaGetLastError(), "softmax_gradient kernel launch");
}

// max[r] = the largest of all[q * n + r] over q in [0, blocks).
inline void max_over_blocks(const float* all, int n, int blocks, float* max, cudaStream_t stream) {
    detail::check_rows(n, blocks, "max_over_blocks");
    detail::max_over_blocks_kernel<<<detail::elementwise_blocks(std::size_t(n), 256), 256, 0, stream>>>(all, n, blocks,
                                                                                                       max);
    gpu::check(cudaGetLastError(), "max_over_blocks kernel launch");
}

// terms[r] = log(sums[r]) - sums[n + r]: each row's loss, whose mean is the loss.
inline void loss_terms(const float* sums, int n, float* terms, cudaStream_t stream) {
    detail::check_rows(n, 1, "loss_terms");
    detail::loss_terms_kernel<<<detail::elementwise_blocks(std::size_t(n), 256), 256, 0, stream>>>(sums, n, terms);
    gpu::check(cudaGetLastError(), "loss_terms kernel launch");
}

}  // namespace weft::exec::cuda_detail
