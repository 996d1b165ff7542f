// The embedding's kernels (embedding.cuh launches them and says what they compute): the
// lookup, the vocabulary-parallel lookup of a rank's slice, and the backward's position and
// token sums. They compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block, without a
// GPU.
#pragma once

#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"

namespace weft::exec::cuda_detail::detail {

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

constexpr int embedding_token_threads = 256;

// Block (g, y) sums group g of `token_groups` (packed as weft/exec/token_groups.hpp says,
// for `tokens` tokens) over its column tile y: the dy rows of one token v, in ascending
// order, into row v - first_row of dwte_rows, which no other block writes. A frequent token
// (punctuation, " the") has many rows; its column tiles run side by side rather than one
// after another in one block. The grid has one row of blocks per token, so its size does not
// depend on how many tokens are distinct (a CUDA graph replays it unchanged); blocks past
// the groups return at once.
template <class T>
__global__ void embedding_backward_token_kernel(const std::int32_t* token_groups, int tokens, const T* dy,
                                                float* dwte_rows, int first_row, int width) {
    const int g = int(blockIdx.x);
    if (g >= token_groups[0]) return;
    const std::int32_t* group_token = token_groups + 1;
    const std::int32_t* group_start = token_groups + 1 + tokens;
    const std::int32_t* order = token_groups + 2 + 2 * std::ptrdiff_t(tokens);
    const int begin = group_start[g], end = group_start[g + 1];
    const int c = int(blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= width) return;
    float sum = 0;
    for (int i = begin; i < end; ++i) sum += to_float(dy[std::size_t(order[i]) * std::size_t(width) + c]);
    dwte_rows[std::size_t(group_token[g] - first_row) * std::size_t(width) + c] += sum;
}

}  // namespace weft::exec::cuda_detail::detail
