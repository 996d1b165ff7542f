// GPT's input layer on the GPU: row n of the output is wte[tokens[n]] + wpe[n % seq_len]
// (tokens are whole sequences, row-major, as the CPU backend's embedding_forward), and its
// backward into dwte and dwpe without atomics, so that gradients are bit-reproducible
// and a CUDA graph replay equals the eager run:
//   dwpe[t] += the sum over sequences b of dy[b * seq_len + t], one thread per (t, column);
//   dwte[v] += the sum of the dy rows whose token is v, one block per vocabulary row that
//              scans the token list in order (a ballot per chunk finds the matching rows).
// Arithmetic is fp32; gradients accumulate (+=) into fp32 buffers. Under tensor parallelism
// a rank holds the wte rows [first_row, first_row + held_rows) of the vocabulary: its lookup
// writes those tokens' rows and zeros elsewhere (fp32, summed over the group before the
// position embedding is added: convert.cuh's convert_adding_periodic), and its backward
// writes only those rows.
#pragma once

#include <cuda_runtime_api.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda {

namespace detail {

// A token outside [0, vocab) cannot throw from the device: its row becomes NaN (and the
// backward never matches it), which no training run mistakes for a result.
template <class T, class P>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, const P* wte, const P* wpe, T* out, int rows,
                                         int seq_len, int width, int vocab) {
    const std::size_t n = std::size_t(rows) * std::size_t(width);
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const std::size_t row = i / std::size_t(width);
        const std::size_t c = i % std::size_t(width);
        const std::int32_t token = tokens[row];
        const std::size_t t = row % std::size_t(seq_len);
        const bool valid = token >= 0 && token < vocab;
        out[i] = from_float<T>(valid ? to_float(wte[std::size_t(token) * width + c]) + to_float(wpe[t * width + c])
                                     : CUDART_NAN_F);
    }
}

// The vocabulary-parallel lookup: row n is wte_rows[tokens[n] - first_row] where this rank
// holds that token's row, else zeros (also for a token outside [0, vocab): the caller
// checked them on the host).
template <class P>
__global__ void vocab_slice_lookup_kernel(const std::int32_t* tokens, const P* wte_rows, int first_row, int held_rows,
                                          float* out, int rows, int width) {
    const std::size_t n = std::size_t(rows) * std::size_t(width);
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const std::int32_t row = tokens[i / std::size_t(width)] - first_row;
        out[i] = row >= 0 && row < held_rows ? to_float(wte_rows[std::size_t(row) * width + i % std::size_t(width)])
                                             : 0.0f;
    }
}

// Element i = t * width + c of dwpe: rows b * seq_len + t of dy hold position t, and their
// column c sits at b * (seq_len * width) + i. Summed over b in order.
template <class T>
__global__ void embedding_backward_position_kernel(const T* dy, float* dwpe, int sequences, int seq_len, int width) {
    const std::size_t n = std::size_t(seq_len) * std::size_t(width);
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        float sum = 0;
        for (int b = 0; b < sequences; ++b) sum += to_float(dy[std::size_t(b) * n + i]);
        dwpe[i] += sum;
    }
}

constexpr int embedding_token_threads = 256;  // a multiple of 32: every warp is full for the ballot
constexpr int embedding_token_warps = embedding_token_threads / 32;

// Block b owns row b of dwte_rows (vocabulary row v = first_row + b), so no other block
// writes it. Threads take columns [c0, c0 + blockDim.x); for each chunk of blockDim.x
// tokens a ballot per warp marks the rows whose token is v, and every thread adds those rows
// (ascending row order) to its column's sum. The row is written once, and only if some
// token matched.
template <class T>
__global__ void embedding_backward_token_kernel(const std::int32_t* tokens, const T* dy, float* dwte_rows,
                                                int first_row, int rows, int width) {
    __shared__ unsigned int masks[embedding_token_warps];
    const std::int32_t v = first_row + std::int32_t(blockIdx.x);
    const int lane = int(threadIdx.x) % 32;
    const int warp = int(threadIdx.x) / 32;
    for (int c0 = 0; c0 < width; c0 += embedding_token_threads) {
        const int c = c0 + int(threadIdx.x);
        float sum = 0;
        bool any = false;  // the same in every thread: all read the same masks
        for (int base = 0; base < rows; base += embedding_token_threads) {
            const int r = base + int(threadIdx.x);
            const unsigned int mask = __ballot_sync(0xffffffffu, r < rows && tokens[r] == v);
            if (lane == 0) masks[warp] = mask;
            __syncthreads();
            for (int w = 0; w < embedding_token_warps; ++w) {
                for (unsigned int m = masks[w]; m != 0; m &= m - 1) {
                    const int bit = __ffs(int(m)) - 1;  // lowest set bit first: ascending rows
                    any = true;
                    if (c < width) sum += to_float(dy[std::size_t(base + 32 * w + bit) * width + c]);
                }
            }
            __syncthreads();  // the next chunk rewrites masks
        }
        if (any && c < width) dwte_rows[std::size_t(blockIdx.x) * width + c] += sum;
    }
}

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
    check(cudaGetLastError(), "embedding_forward kernel launch");
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
    check(cudaGetLastError(), "vocab_slice_lookup kernel launch");
}

// dwte_rows [held_rows, width] += per-token sums of the dy rows whose token is in
// [first_row, first_row + held_rows), dwpe [seq_len, width] += per-position sums (fp32);
// dy [sequences * seq_len, width]. Bit-reproducible (fixed summation order).
template <class T>
void embedding_backward_rows(const std::int32_t* tokens, const T* dy, float* dwte_rows, int first_row, int held_rows,
                             float* dwpe, int sequences, int seq_len, int width, cudaStream_t stream) {
    detail::require_embedding_shape(sequences, seq_len, width, "held_rows", held_rows, 0, "embedding_backward");
    require(first_row >= 0, "embedding_backward: first_row", first_row, "must be a vocabulary row (>= 0)");
    require(tokens != nullptr && dy != nullptr && (dwte_rows != nullptr || held_rows == 0) && dwpe != nullptr,
            "embedding_backward: tokens, dy, dwte, dwpe", "a null pointer", "must be device pointers");
    constexpr unsigned int threads = 256;
    const std::size_t positions = std::size_t(seq_len) * std::size_t(width);
    detail::embedding_backward_position_kernel<<<detail::elementwise_blocks(positions, threads), threads, 0, stream>>>(
        dy, dwpe, sequences, seq_len, width);
    check(cudaGetLastError(), "embedding_backward (positions) kernel launch");
    if (held_rows == 0) return;
    detail::embedding_backward_token_kernel<<<unsigned(held_rows), detail::embedding_token_threads, 0, stream>>>(
        tokens, dy, dwte_rows, first_row, sequences * seq_len, width);
    check(cudaGetLastError(), "embedding_backward (tokens) kernel launch");
}

// dwte [vocab, width] += per-token sums of dy rows, dwpe [seq_len, width] += per-position
// sums (fp32); dy [sequences * seq_len, width]. Bit-reproducible (fixed summation order).
template <class T>
void embedding_backward(const std::int32_t* tokens, const T* dy, float* dwte, float* dwpe, int sequences, int seq_len,
                        int width, int vocab, cudaStream_t stream) {
    require(vocab > 0, "embedding_backward: vocab", vocab, "must be positive");
    embedding_backward_rows(tokens, dy, dwte, 0, vocab, dwpe, sequences, seq_len, width, stream);
}

}  // namespace weft::cuda
