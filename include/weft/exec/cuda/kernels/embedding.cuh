// GPT's input layer on the GPU: row n of the output is wte[tokens[n]] + wpe[n % seq_len]
// (tokens are whole sequences, row-major, as the CPU backend's embedding_forward), and its
// backward into dwte and dwpe without atomics, so that gradients are bit-reproducible
// and a CUDA graph replay equals the eager run:
//   dwpe[t] += the sum over sequences b of dy[b * seq_len + t], one thread per (t, column);
//   dwte[v] += the sum of the dy rows whose token is v, one block per token that occurs,
//              over its rows in ascending order, from the rows grouped by token on the host
//              (weft/exec/token_groups.hpp): the work is the rows' size, not vocab x tokens.
// Arithmetic is fp32; gradients accumulate (+=) into fp32 buffers. Under tensor parallelism
// a rank holds the wte rows [first_row, first_row + held_rows) of the vocabulary: its lookup
// writes those tokens' rows and zeros elsewhere (fp32, summed over the group before the
// position embedding is added: convert.cuh's convert_adding_periodic), and its backward
// writes only those rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/embedding_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

namespace detail {

// rows_name: what the kernel calls its wte rows (vocab, or held_rows of a rank's slice,
// which may hold none).
inline void require_embedding_shape(int sequences, int seq_len, int width, const char* rows_name, int rows,
                                    int least_rows, const char* what) {
    const std::string name(what);
    require(sequences > 0, name + ": sequences", sequences, "must be positive");
    require(seq_len > 0, name + ": seq_len", seq_len, "must be positive");
    require(width > 0, name + ": width", width, "must be positive");
    require(rows >= least_rows, name + ": " + rows_name, rows, "must be at least " + std::to_string(least_rows));
    require(std::size_t(sequences) * std::size_t(seq_len) <= std::size_t(0x7fffffff), name + ": sequences * seq_len",
            std::size_t(sequences) * std::size_t(seq_len), "must fit in an int");
}

}  // namespace detail

// out [sequences * seq_len, width] = wte[tokens] + wpe[position]; wte [vocab, width],
// wpe [seq_len, width] (float or bf16), out float or bf16.
template <class T, class P>
void embedding_forward(const std::int32_t* tokens, const P* wte, const P* wpe, T* out, int sequences, int seq_len,
                       int width, int vocab, cudaStream_t stream) {
    detail::require_embedding_shape(sequences, seq_len, width, "vocab", vocab, 1, "embedding_forward");
    require(tokens != nullptr && wte != nullptr && wpe != nullptr && out != nullptr,
            "embedding_forward: tokens, wte, wpe, out", "a null pointer", "must be device pointers");
    const std::size_t n = std::size_t(sequences) * std::size_t(seq_len) * std::size_t(width);
    constexpr unsigned int threads = 256;
    detail::embedding_forward_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(
        tokens, wte, wpe, out, sequences * seq_len, seq_len, width, vocab);
    gpu::check(cudaGetLastError(), "embedding_forward kernel launch");
}

// out [sequences * seq_len, width] (fp32): row n is wte_rows[tokens[n] - first_row] where
// the token is in [first_row, first_row + held_rows), zeros elsewhere; wte_rows [held_rows,
// width] (float or bf16).
template <class P>
void vocab_slice_lookup(const std::int32_t* tokens, const P* wte_rows, int first_row, int held_rows, float* out,
                        int sequences, int seq_len, int width, cudaStream_t stream) {
    detail::require_embedding_shape(sequences, seq_len, width, "held_rows", held_rows, 0, "vocab_slice_lookup");
    require(first_row >= 0, "vocab_slice_lookup: first_row", first_row, "must be a vocabulary row (>= 0)");
    require(tokens != nullptr && (wte_rows != nullptr || held_rows == 0) && out != nullptr,
            "vocab_slice_lookup: tokens, wte_rows, out", "a null pointer", "must be device pointers");
    const std::size_t n = std::size_t(sequences) * std::size_t(seq_len) * std::size_t(width);
    constexpr unsigned int threads = 256;
    detail::vocab_slice_lookup_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(
        tokens, wte_rows, first_row, held_rows, out, sequences * seq_len, width);
    gpu::check(cudaGetLastError(), "vocab_slice_lookup kernel launch");
}

// dwte_rows [held_rows, width] += per-token sums of the dy rows whose token is in
// [first_row, first_row + held_rows), dwpe [seq_len, width] += per-position sums (fp32);
// dy [sequences * seq_len, width]. `token_groups` is the device copy of
// exec::group_rows_by_token(tokens, first_row, held_rows) (not read when held_rows is 0).
// Bit-reproducible (fixed summation order).
template <class T>
void embedding_backward_rows(const std::int32_t* token_groups, const T* dy, float* dwte_rows, int first_row,
                             int held_rows, float* dwpe, int sequences, int seq_len, int width, cudaStream_t stream) {
    detail::require_embedding_shape(sequences, seq_len, width, "held_rows", held_rows, 0, "embedding_backward");
    require(first_row >= 0, "embedding_backward: first_row", first_row, "must be a vocabulary row (>= 0)");
    require((token_groups != nullptr || held_rows == 0) && dy != nullptr &&
                (dwte_rows != nullptr || held_rows == 0) && dwpe != nullptr,
            "embedding_backward: token groups, dy, dwte, dwpe", "a null pointer", "must be device pointers");
    constexpr unsigned int threads = 256;
    const std::size_t positions = std::size_t(seq_len) * std::size_t(width);
    detail::embedding_backward_position_kernel<<<detail::elementwise_blocks(positions, threads), threads, 0, stream>>>(
        dy, dwpe, sequences, seq_len, width);
    gpu::check(cudaGetLastError(), "embedding_backward (positions) kernel launch");
    if (held_rows == 0) return;
    const int tokens = sequences * seq_len;  // a row of blocks per token: the most groups there can be
    const dim3 grid(unsigned(tokens), unsigned((width + detail::embedding_token_threads - 1) /
                                               detail::embedding_token_threads));
    detail::embedding_backward_token_kernel<<<grid, detail::embedding_token_threads, 0, stream>>>(
        token_groups, tokens, dy, dwte_rows, first_row, width);
    gpu::check(cudaGetLastError(), "embedding_backward (tokens) kernel launch");
}

// dwte [vocab, width] += per-token sums of dy rows, dwpe [seq_len, width] += per-position
// sums (fp32); dy [sequences * seq_len, width]; `token_groups` the device copy of
// exec::group_rows_by_token(tokens, 0, vocab). Bit-reproducible (fixed summation order).
template <class T>
void embedding_backward(const std::int32_t* token_groups, const T* dy, float* dwte, float* dwpe, int sequences,
                        int seq_len, int width, int vocab, cudaStream_t stream) {
    require(vocab > 0, "embedding_backward: vocab", vocab, "must be positive");
    embedding_backward_rows(token_groups, dy, dwte, 0, vocab, dwpe, sequences, seq_len, width, stream);
}

}  // namespace weft::exec::cuda_detail
