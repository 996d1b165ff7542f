// Column sums of a [rows, cols] matrix in two passes with a fixed order (the chunking of
// weft/exec/cuda/column_sums_layout.hpp): each block sums one chunk of rows for 32 columns
// into scratch, then one thread per column adds the chunks' partials in chunk order to the
// fp32 accumulator. No atomics, so results repeat bit for bit. The bias gradient and
// LayerNorm's weight gradient are its two users; a `Terms` functor says what a row adds.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/column_sums_layout.hpp"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda::detail {

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

// Queues both passes. `partials` holds column_sum_scratch_floats(rows, cols, Sums) floats;
// rows and cols are positive (the callers check them, naming their own parameters). `what`,
// the caller's name, goes into messages, which are only built for an error: every bias and
// LayerNorm weight gradient of a step comes through here.
template <int Sums, class Terms>
void column_sums(Terms terms, float* partials, column_outputs<Sums> out, int rows, int cols, cudaStream_t stream,
                 std::string_view what) {
    const int tiles = (cols + column_sum_columns - 1) / column_sum_columns;
    if (tiles > column_sum_max_tiles)
        throw invalid_argument(std::string(what) + ": cols", cols,
                               "must be at most " + std::to_string(column_sum_max_tiles * column_sum_columns));
    if (partials == nullptr)
        throw invalid_argument(std::string(what) + ": partials", "a null pointer",
                               "must hold column_sum_scratch_floats(rows, cols, " + std::to_string(Sums) + ") floats");
    const auto chunks = static_cast<unsigned int>(column_sum_chunks(rows));
    column_partials_kernel<Sums>
        <<<dim3(chunks, unsigned(tiles)), dim3(column_sum_columns, column_sum_warps), 0, stream>>>(terms, partials,
                                                                                                   rows, cols);
    check(cudaGetLastError(), "column_partials_kernel launch");
    constexpr int threads = 256;
    add_column_partials_kernel<Sums>
        <<<unsigned((cols + threads - 1) / threads), threads, 0, stream>>>(partials, int(chunks), cols, out);
    check(cudaGetLastError(), "add_column_partials_kernel launch");
}

}  // namespace weft::cuda::detail
