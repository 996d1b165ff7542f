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
#include "weft/exec/cuda/kernels/column_sums_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail::detail {

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
    gpu::check(cudaGetLastError(), "column_partials_kernel launch");
    constexpr int threads = 256;
    add_column_partials_kernel<Sums>
        <<<unsigned((cols + threads - 1) / threads), threads, 0, stream>>>(partials, int(chunks), cols, out);
    gpu::check(cudaGetLastError(), "add_column_partials_kernel launch");
}

}  // namespace weft::exec::cuda_detail::detail
