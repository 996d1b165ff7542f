// The tiling both flash attention kernel sets share (flash_attention.cuh on WMMA,
// flash_attention_mma_kernels.cuh on mma.sync): a block of 4 warps takes one 64-row tile
// of queries or keys of one (batch, head), each warp 16 of its rows; rows of a shared tile
// are padded by 8 elements. Compiles with a host compiler too (device_or_emulated.cuh).
#pragma once

#include <cstddef>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"

namespace weft::exec::cuda_detail::flash {

constexpr int tile = 64;  // query rows or keys per block tile
constexpr int warps = 4;  // each owns 16 rows of the tile
constexpr int threads = 32 * warps;
template <int D>
constexpr int head_ld = D + 8;  // bf16 per row of a 64 x D tile of q, k, v or dout

// Where (batch b, head h) rows and statistics are.
struct head_view {
    int seq, heads, b, h;
    [[nodiscard]] __device__ std::size_t row(int t) const { return std::size_t(b) * seq + t; }
    [[nodiscard]] __device__ std::size_t stat(int t) const { return (std::size_t(b) * heads + h) * seq + t; }
};

// The grid is (head, batch, tile): the tile is its slowest dimension, so blocks start tile by
// tile over every head and batch. A causal tile's work grows (queries) or shrinks (keys) with
// its index; started heaviest first, the light tiles fill the last wave instead of a few heavy
// ones running alone at the end.
[[nodiscard]] __device__ inline head_view view_of_block(int seq, int heads) {
    return {seq, heads, int(blockIdx.y), int(blockIdx.x)};
}
// A query tile, the last (with the most keys before it) first.
[[nodiscard]] __device__ inline int heaviest_first() {
    return int(gridDim.z - 1 - blockIdx.z);
}

}  // namespace weft::exec::cuda_detail::flash
