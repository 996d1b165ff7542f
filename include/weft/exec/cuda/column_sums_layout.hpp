// How the GPU's column sums (a linear layer's bias gradient, LayerNorm's weight and bias
// gradients) split their rows. Host code that sizes the kernels' scratch and the kernels
// themselves (weft/exec/cuda/kernels/column_sums.cuh) read it from here.
//
// Why chunks: one block per 32 columns left an H200 with 24 blocks for GPT-2's 768 columns,
// and LayerNorm's weight gradient ran at 443 GB/s, 0.11 ms of each of a step's 25 (docs/cuda-figures.md).
// Chunks of a fixed number of rows give rows / 256 times the blocks, and because the chunking
// does not depend on the GPU, every run adds the same numbers in the same order: results
// repeat bit for bit (a CUDA graph's replay equals the eager run).
#pragma once

#include <cstddef>

namespace weft::exec::cuda_detail {

// Rows one block sums for its columns; its partial sums go to scratch.
inline constexpr int column_sum_chunk_rows = 256;

[[nodiscard]] constexpr std::size_t column_sum_chunks(int rows) {
    return rows <= 0 ? 0 : (std::size_t(rows) + column_sum_chunk_rows - 1) / column_sum_chunk_rows;
}

// Floats of scratch a column-sum kernel needs for `sums` sums (1: a bias, 2: gamma and beta)
// of every column of a [rows, cols] matrix: one partial per chunk, sum and column.
[[nodiscard]] constexpr std::size_t column_sum_scratch_floats(int rows, int cols, int sums) {
    return cols <= 0 || sums <= 0 ? 0 : column_sum_chunks(rows) * std::size_t(cols) * std::size_t(sums);
}

static_assert(column_sum_chunks(256) == 1 && column_sum_chunks(257) == 2 && column_sum_chunks(16384) == 64);
static_assert(column_sum_scratch_floats(16384, 768, 2) == 64 * 768 * 2);

}  // namespace weft::exec::cuda_detail
