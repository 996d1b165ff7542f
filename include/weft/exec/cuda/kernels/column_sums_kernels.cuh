// The kernels of the column sums (column_sums.cuh launches them and says how they split the
// work). They compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block, without a
// GPU.
#pragma once

#include <cstddef>

#include "weft/exec/cuda/column_sums_layout.hpp"
#include "weft/exec/cuda/kernels/device_or_emulated.cuh"

namespace weft::exec::cuda_detail::detail {

constexpr int column_sum_columns = 32;       // a block's columns, one per lane: a warp reads 32 neighbours of a row
constexpr int column_sum_warps = 8;          // each warp of a block takes every 8th row of the chunk
constexpr int column_sum_max_tiles = 65535;  // blocks of columns: the grid's y limit

template <int Sums>
struct column_outputs {
    float* sums[Sums];
};

// Pass 1: partials[(s * chunks + chunk) * cols + c] = sum over the chunk's rows r of term s
// of element (r, c). terms(r, i, sums) adds the terms of element i = r * cols + c.
template <int Sums, class Terms>
__global__ void column_partials_kernel(Terms terms, float* partials, int rows, int cols) {
    __shared__ float warp_partials[Sums][column_sum_warps][column_sum_columns + 1];
    const int chunk = blockIdx.x;
    const int c = blockIdx.y * column_sum_columns + threadIdx.x;
    const int first = chunk * column_sum_chunk_rows;
    const int last = min(rows, first + column_sum_chunk_rows);
    float sums[Sums] = {};
    if (c < cols) {
#pragma unroll 4
        for (int r = first + int(threadIdx.y); r < last; r += column_sum_warps)
            terms(r, std::size_t(r) * std::size_t(cols) + std::size_t(c), sums);
    }
    for (int s = 0; s < Sums; ++s) warp_partials[s][threadIdx.y][threadIdx.x] = sums[s];
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
    for (int s = 0; s < Sums; ++s) {
        float total = 0;
        for (int w = 0; w < column_sum_warps; ++w) total += warp_partials[s][w][threadIdx.x];
        partials[(std::size_t(s) * gridDim.x + chunk) * std::size_t(cols) + std::size_t(c)] = total;
    }
}

// Pass 2: out.sums[s][c] += the chunks' partials of column c, in chunk order.
template <int Sums>
__global__ void add_column_partials_kernel(const float* partials, int chunks, int cols, column_outputs<Sums> out) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int s = 0; s < Sums; ++s) {
        float total = 0;
        for (int k = 0; k < chunks; ++k)
            total += partials[(std::size_t(s) * std::size_t(chunks) + std::size_t(k)) * std::size_t(cols) + c];
        out.sums[s][c] += total;
    }
}

}  // namespace weft::exec::cuda_detail::detail
