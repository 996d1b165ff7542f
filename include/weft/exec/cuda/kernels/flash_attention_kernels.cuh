// The kernels of causal multi-head self-attention on tensor cores, flash-style (tiled, online
// softmax; the seq x seq scores never reach global memory), forward and backward, bf16 in and
// out with fp32 softmax statistics and accumulators; flash_attention.cuh launches them. What
// exec::cuda runs by default; attention.cuh keeps the straightforward exact kernels as the
// reference the benchmark compares with.
//
// Same layout and saved state as attention.cuh: qkv [batch*seq, 3*C] holds q, k, v along the
// feature dimension, head h at columns h*D; out and dout [batch*seq, C]; lse and delta
// [batch, heads, seq] fp32.
//
// A block of 4 warps takes one 64-row tile (of queries, or of keys) of one (batch, head),
// the heaviest tiles first (view_of_block);
// each warp owns 16 of its rows. Products run as 16x16x16 WMMA bf16 fragments with fp32
// accumulators; the per-row softmax arithmetic runs in fp32 on the scores staged in shared
// memory, two lanes per row. Probabilities and their gradients are rounded to bf16 where they
// feed a product, as FlashAttention-2 does.
//
// Backward runs without atomics, so results repeat bit for bit: delta_i = dout_i . out_i,
// then one kernel per key tile (dK, dV, summing over the query tiles at or after it) and one
// per query tile (dQ, over the key tiles at or before it), which recomputes the scores a
// second time instead of adding partial dQ from every key tile.
//
// Head sizes 32, 64, 96 and 128; any sequence length (tiles past the end are zero-padded and
// masked).
//
// The kernels compile with a host compiler too (device_or_emulated.cuh, with WMMA emulated by
// simt_wmma.hpp), and tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated
// thread block against the double reference in CI (under both sanitizers), without a GPU.
#pragma once

#include <cuda_bf16.h>
#include <math_constants.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/kernels/flash_tiles.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"
#if defined(__CUDACC__)
#include <mma.h>
#else
#include "weft/exec/cuda/simt_wmma.hpp"
#endif

namespace weft::exec::cuda_detail {

namespace flash {


namespace wmma = nvcuda::wmma;
using detail::from_float;
using detail::to_float;
using detail::warp_sum;

constexpr int frag = 16;            // WMMA's m = n = k
constexpr int score_ld = tile + 4;  // floats per row of a warp's 16 x 64 scores (padding spreads banks)
constexpr int prob_ld = tile + 8;   // bf16 per row of a warp's 16 x 64 probabilities
template <int D>
constexpr int out_ld = D + 4;  // floats per row of a warp's 16 x D output accumulator

using a_fragment = wmma::fragment<wmma::matrix_a, frag, frag, frag, bf16, wmma::row_major>;
using b_transposed = wmma::fragment<wmma::matrix_b, frag, frag, frag, bf16, wmma::col_major>;
using b_fragment = wmma::fragment<wmma::matrix_b, frag, frag, frag, bf16, wmma::row_major>;
using accumulator = wmma::fragment<wmma::accumulator, frag, frag, frag, float>;

// The column a lane takes at its step i through `width` columns of its row r (of the warp's 16)
// and half: the steps rotated by r / 8 + 2 half. In rows padded to 68 floats, row r starts at
// bank 4r, so walking the columns in order put 4 lanes on one bank at every step (rows r and
// r + 8, both halves); rotated, the 32 lanes hit 32 banks where width is 8, 32 or 64.
[[nodiscard]] __device__ inline int spread(int i, int width, int r, int half) { return (i + r / 8 + 2 * half) % width; }

// Rows [first, first + 64) of one head's D columns of a row-major matrix (`column` points at
// the head's first column of row 0, `stride` elements per row) into shared [64][D + 8];
// rows at or past the sequence's end are zeros. 16-byte loads: D and the strides are
// multiples of 8 elements.
template <int D>
__device__ inline void load_tile(bf16* shared_tile, const bf16* column, std::size_t stride, int first,
                                 const head_view& v) {
    constexpr int vectors = D / 8;
    for (int i = threadIdx.x; i < tile * vectors; i += threads) {
        const int r = i / vectors, c = (i % vectors) * 8;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (first + r < v.seq) value = *reinterpret_cast<const uint4*>(column + v.row(first + r) * stride + c);
        *reinterpret_cast<uint4*>(shared_tile + r * head_ld<D> + c) = value;
    }
}

// A warp's 16 rows of a shared 64 x D tile as D/16 row-major A fragments (kept in registers).
template <int D>
__device__ inline void load_rows(a_fragment (&rows)[D / frag], const bf16* shared_tile, int warp) {
#pragma unroll
    for (int kk = 0; kk < D / frag; ++kk)
        wmma::load_matrix_sync(rows[kk], shared_tile + warp * frag * head_ld<D> + kk * frag, head_ld<D>);
}

// scores[16][64] (row-major, score_ld) = rows (16 x D, A fragments) times the transpose of a
// shared 64 x D tile: each row of the result dots the warp's row with the tile's 64 rows.
template <int D>
__device__ inline void rows_times_tile_transposed(const a_fragment (&rows)[D / frag], const bf16* shared_tile,
                                                  float* scores) {
#pragma unroll
    for (int n = 0; n < tile / frag; ++n) {
        accumulator acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D / frag; ++kk) {
            b_transposed b;
            wmma::load_matrix_sync(b, shared_tile + n * frag * head_ld<D> + kk * frag, head_ld<D>);
            wmma::mma_sync(acc, rows[kk], b, acc);
        }
        wmma::store_matrix_sync(scores + n * frag, acc, score_ld, wmma::mem_row_major);
    }
}

// sum += p (16 x 64 bf16, row-major, prob_ld) times columns [16 j, 16 j + 16) of a shared
// 64 x D tile.
template <int D>
__device__ inline void accumulate_probs_times_columns(accumulator& sum, const bf16* p, const bf16* shared_tile,
                                                      int j) {
#pragma unroll
    for (int kk = 0; kk < tile / frag; ++kk) {
        a_fragment a;
        wmma::load_matrix_sync(a, p + kk * frag, prob_ld);
        b_fragment b;
        wmma::load_matrix_sync(b, shared_tile + kk * frag * head_ld<D> + j * frag, head_ld<D>);
        wmma::mma_sync(sum, a, b, sum);
    }
}

// sums[j] += p times columns [16 j, 16 j + 16) of the tile, for every j.
template <int D>
__device__ inline void accumulate_probs_times_tile(accumulator (&sums)[D / frag], const bf16* p,
                                                   const bf16* shared_tile) {
#pragma unroll
    for (int j = 0; j < D / frag; ++j) accumulate_probs_times_columns<D>(sums[j], p, shared_tile, j);
}

// Writes a warp's 16 x D accumulators, times `scale`, as bf16 to the rows of `column` (as in
// load_tile) from `first`, leaving out rows at or past the sequence's end. `scratch` is the
// warp's 16 x score_ld floats.
template <int D>
__device__ inline void store_rows(accumulator (&sums)[D / frag], float scale, float* scratch, bf16* column,
                                  std::size_t stride, int first, const head_view& v) {
    const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
#pragma unroll
    for (int j = 0; j < D / frag; ++j) {
        wmma::store_matrix_sync(scratch, sums[j], score_ld, wmma::mem_row_major);
        __syncwarp();
        if (first + r < v.seq) {
            bf16* out = column + v.row(first + r) * stride + j * frag;
#pragma unroll
            for (int c = half * 8; c < half * 8 + 8; ++c) out[c] = from_float<bf16>(scratch[r * score_ld + c] * scale);
        }
        __syncwarp();
    }
}

template <int D>
constexpr std::size_t forward_shared_bytes() {
    return 3 * std::size_t(tile) * head_ld<D> * sizeof(bf16) + warps * std::size_t(frag) * score_ld * sizeof(float) +
           warps * std::size_t(frag) * prob_ld * sizeof(bf16) + warps * std::size_t(frag) * out_ld<D> * sizeof(float);
}

// One block per (query tile, head, batch).
template <int D>
__global__ void __launch_bounds__(threads)
    forward_kernel(const bf16* qkv, bf16* out, float* lse, int seq, int heads, float scale) {
    WEFT_DYNAMIC_SHARED_MEMORY(shared);
    constexpr int ld = head_ld<D>;
    bf16* q_tile = reinterpret_cast<bf16*>(shared);
    bf16* k_tile = q_tile + tile * ld;
    bf16* v_tile = k_tile + tile * ld;
    float* scores_all = reinterpret_cast<float*>(v_tile + tile * ld);
    bf16* probs_all = reinterpret_cast<bf16*>(scores_all + warps * frag * score_ld);
    float* out_all = reinterpret_cast<float*>(probs_all + warps * frag * prob_ld);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* scores = scores_all + warp * frag * score_ld;
    bf16* probs = probs_all + warp * frag * prob_ld;
    float* acc = out_all + warp * frag * out_ld<D>;
    const head_view v = view_of_block(seq, heads);
    const int C = heads * D;
    const std::size_t stride = 3 * std::size_t(C);
    const int query_tile = heaviest_first(), q0 = query_tile * tile;

    load_tile<D>(q_tile, qkv + v.h * D, stride, q0, v);
    __syncthreads();
    a_fragment q[D / frag];
    load_rows<D>(q, q_tile, warp);

    // Two lanes per row: row r of the warp's 16, key columns [32 half, 32 half + 32) of a tile
    // and output columns [D/2 half, D/2 half + D/2).
    const int r = lane / 2, half = lane % 2;
    const int qi = q0 + warp * frag + r;
    for (int i = 0; i < D / 2; ++i) acc[r * out_ld<D> + half * (D / 2) + spread(i, D / 2, r, half)] = 0.0f;
    float m = -CUDART_INF_F, l = 0.0f;

    for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {  // causal: no key after the tile's last query
        const int k0 = key_tile * tile;
        __syncthreads();  // every warp is done with the previous key and value tiles
        load_tile<D>(k_tile, qkv + C + v.h * D, stride, k0, v);
        load_tile<D>(v_tile, qkv + 2 * C + v.h * D, stride, k0, v);
        __syncthreads();

        rows_times_tile_transposed<D>(q, k_tile, scores);
        __syncwarp();

        // Online softmax. Key k0 <= qi is in every tile visited, so each row has a finite max.
        float tile_max = -CUDART_INF_F;
        for (int j = 0; j < 32; ++j) {
            const int c = half * 32 + spread(j, 32, r, half), key = k0 + c;
            if (key <= qi && key < seq) tile_max = fmaxf(tile_max, scores[r * score_ld + c] * scale);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        const float m_new = fmaxf(m, tile_max);
        const float shift = m_new == -CUDART_INF_F ? 0.0f : m_new;  // a padded row: nothing to weigh
        const float rescale = expf(m - shift);                      // 0 on the first tile
        float sum = 0.0f;
        for (int j = 0; j < 32; ++j) {
            const int c = half * 32 + spread(j, 32, r, half), key = k0 + c;
            const float p = key <= qi && key < seq ? expf(scores[r * score_ld + c] * scale - shift) : 0.0f;
            probs[r * prob_ld + c] = from_float<bf16>(p);
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = rescale * l + sum;
        m = m_new;
        for (int i = 0; i < D / 2; ++i) acc[r * out_ld<D> + half * (D / 2) + spread(i, D / 2, r, half)] *= rescale;
        __syncwarp();

        // acc += p v, 16 output columns at a time through the scores' space (free now).
#pragma unroll
        for (int j = 0; j < D / frag; ++j) {
            accumulator pv;
            wmma::fill_fragment(pv, 0.0f);
            accumulate_probs_times_columns<D>(pv, probs, v_tile, j);
            wmma::store_matrix_sync(scores, pv, score_ld, wmma::mem_row_major);
            __syncwarp();
            for (int i = 0; i < 8; ++i) {
                const int c = half * 8 + spread(i, 8, r, half);
                acc[r * out_ld<D> + j * frag + c] += scores[r * score_ld + c];
            }
            __syncwarp();
        }
    }

    if (qi < seq) {
        const float inverse = 1.0f / l;
        bf16* o = out + v.row(qi) * C + v.h * D;
        for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c)
            o[c] = from_float<bf16>(acc[r * out_ld<D> + c] * inverse);
        if (half == 0) lse[v.stat(qi)] = m + logf(l);
    }
}

// delta[b, h, t] = dout . out over the head's columns; one warp per (row, head).
template <class T>
__global__ void delta_kernel(const T* out, const T* dout, float* delta, int rows, int seq, int heads, int head_dim) {
    const std::size_t warp_id = (blockIdx.x * std::size_t(blockDim.x) + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (warp_id >= std::size_t(rows) * heads) return;
    const int row = int(warp_id / heads), h = int(warp_id % heads);
    const std::size_t at = std::size_t(row) * heads * head_dim + std::size_t(h) * head_dim;
    float s = 0.0f;
    for (int c = lane; c < head_dim; c += 32) s += to_float(dout[at + c]) * to_float(out[at + c]);
    s = warp_sum(s);
    if (lane == 0) {
        const int b = row / seq, t = row % seq;
        delta[(std::size_t(b) * heads + h) * seq + t] = s;
    }
}

template <int D>
constexpr std::size_t key_value_shared_bytes() {
    return 2 * std::size_t(tile) * head_ld<D> * sizeof(bf16) + 2 * std::size_t(tile) * sizeof(float) +
           warps * (2 * std::size_t(frag) * score_ld * sizeof(float) + 2 * std::size_t(frag) * prob_ld * sizeof(bf16));
}

// One block per (key tile, head, batch): dK = scale sum_i dS_ij q_i and dV = sum_i p_ij dout_i
// over the queries i >= j, in the transposed form: a warp's 16 keys are the rows.
template <int D>
__global__ void __launch_bounds__(threads)
    backward_key_value_kernel(const bf16* qkv, const bf16* dout, const float* lse, const float* delta, bf16* dqkv,
                              int seq, int heads, float scale) {
    WEFT_DYNAMIC_SHARED_MEMORY(shared);
    constexpr int ld = head_ld<D>;
    bf16* q_tile = reinterpret_cast<bf16*>(shared);
    bf16* dout_tile = q_tile + tile * ld;
    float* lse_tile = reinterpret_cast<float*>(dout_tile + tile * ld);
    float* delta_tile = lse_tile + tile;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* per_warp = delta_tile + tile + warp * 2 * frag * score_ld;
    float* scores_t = per_warp;                    // S^T: [16 keys][64 queries]
    float* dprobs_t = per_warp + frag * score_ld;  // dP^T
    bf16* probs_t =
        reinterpret_cast<bf16*>(delta_tile + tile + warps * 2 * frag * score_ld) + warp * 2 * frag * prob_ld;
    bf16* dscores_t = probs_t + frag * prob_ld;  // dS^T

    const head_view v = view_of_block(seq, heads);
    const int C = heads * D;
    const std::size_t stride = 3 * std::size_t(C);
    const int key_tile = int(blockIdx.z), k0 = key_tile * tile;  // key tile 0 has the most queries after it

    // The warp's keys and values, staged through the query tiles' space.
    load_tile<D>(q_tile, qkv + C + v.h * D, stride, k0, v);
    load_tile<D>(dout_tile, qkv + 2 * C + v.h * D, stride, k0, v);
    __syncthreads();
    a_fragment k[D / frag], values[D / frag];
    load_rows<D>(k, q_tile, warp);
    load_rows<D>(values, dout_tile, warp);
    accumulator dk[D / frag], dv[D / frag];
#pragma unroll
    for (int j = 0; j < D / frag; ++j) {
        wmma::fill_fragment(dk[j], 0.0f);
        wmma::fill_fragment(dv[j], 0.0f);
    }

    const int r = lane / 2, half = lane % 2;
    const int key = k0 + warp * frag + r;
    const int query_tiles = (seq + tile - 1) / tile;
    for (int query_tile = key_tile; query_tile < query_tiles; ++query_tile) {
        const int q0 = query_tile * tile;
        __syncthreads();  // every warp is done with the previous tiles (and the staging above)
        load_tile<D>(q_tile, qkv + v.h * D, stride, q0, v);
        load_tile<D>(dout_tile, dout + v.h * D, std::size_t(C), q0, v);
        for (int i = threadIdx.x; i < tile; i += threads) {
            const bool inside = q0 + i < seq;
            lse_tile[i] = inside ? lse[v.stat(q0 + i)] : 0.0f;
            delta_tile[i] = inside ? delta[v.stat(q0 + i)] : 0.0f;
        }
        __syncthreads();

        rows_times_tile_transposed<D>(k, q_tile, scores_t);          // k_j . q_i
        rows_times_tile_transposed<D>(values, dout_tile, dprobs_t);  // v_j . dout_i
        __syncwarp();
        for (int j = 0; j < 32; ++j) {
            const int c = half * 32 + spread(j, 32, r, half), query = q0 + c;
            const bool kept = query >= key && query < seq && key < seq;
            const float p = kept ? expf(scores_t[r * score_ld + c] * scale - lse_tile[c]) : 0.0f;
            probs_t[r * prob_ld + c] = from_float<bf16>(p);
            dscores_t[r * prob_ld + c] = from_float<bf16>(p * (dprobs_t[r * score_ld + c] - delta_tile[c]));
        }
        __syncwarp();
        accumulate_probs_times_tile<D>(dv, probs_t, dout_tile);
        accumulate_probs_times_tile<D>(dk, dscores_t, q_tile);
    }
    store_rows<D>(dk, scale, scores_t, dqkv + C + v.h * D, stride, k0 + warp * frag, v);
    store_rows<D>(dv, 1.0f, scores_t, dqkv + 2 * C + v.h * D, stride, k0 + warp * frag, v);
}

template <int D>
constexpr std::size_t query_shared_bytes() {
    return 2 * std::size_t(tile) * head_ld<D> * sizeof(bf16) +
           warps * (2 * std::size_t(frag) * score_ld * sizeof(float) + std::size_t(frag) * prob_ld * sizeof(bf16));
}

// One block per (query tile, head, batch): dQ = scale sum_j dS_ij k_j over the keys j <= i.
template <int D>
__global__ void __launch_bounds__(threads)
    backward_query_kernel(const bf16* qkv, const bf16* dout, const float* lse, const float* delta, bf16* dqkv, int seq,
                          int heads, float scale) {
    WEFT_DYNAMIC_SHARED_MEMORY(shared);
    constexpr int ld = head_ld<D>;
    bf16* k_tile = reinterpret_cast<bf16*>(shared);
    bf16* v_tile = k_tile + tile * ld;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* scores = reinterpret_cast<float*>(v_tile + tile * ld) + warp * 2 * frag * score_ld;
    float* dprobs = scores + frag * score_ld;
    bf16* dscores =
        reinterpret_cast<bf16*>(reinterpret_cast<float*>(v_tile + tile * ld) + warps * 2 * frag * score_ld) +
        warp * frag * prob_ld;

    const head_view v = view_of_block(seq, heads);
    const int C = heads * D;
    const std::size_t stride = 3 * std::size_t(C);
    const int query_tile = heaviest_first(), q0 = query_tile * tile;

    // The warp's queries and output gradients, staged through the key tiles' space.
    load_tile<D>(k_tile, qkv + v.h * D, stride, q0, v);
    load_tile<D>(v_tile, dout + v.h * D, std::size_t(C), q0, v);
    __syncthreads();
    a_fragment q[D / frag], d_out[D / frag];
    load_rows<D>(q, k_tile, warp);
    load_rows<D>(d_out, v_tile, warp);
    accumulator dq[D / frag];
#pragma unroll
    for (int j = 0; j < D / frag; ++j) wmma::fill_fragment(dq[j], 0.0f);

    const int r = lane / 2, half = lane % 2;
    const int qi = q0 + warp * frag + r;
    const float lse_i = qi < seq ? lse[v.stat(qi)] : 0.0f;
    const float delta_i = qi < seq ? delta[v.stat(qi)] : 0.0f;
    for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
        const int k0 = key_tile * tile;
        __syncthreads();  // every warp is done with the previous tiles (and the staging above)
        load_tile<D>(k_tile, qkv + C + v.h * D, stride, k0, v);
        load_tile<D>(v_tile, qkv + 2 * C + v.h * D, stride, k0, v);
        __syncthreads();

        rows_times_tile_transposed<D>(q, k_tile, scores);      // q_i . k_j
        rows_times_tile_transposed<D>(d_out, v_tile, dprobs);  // dout_i . v_j
        __syncwarp();
        for (int j = 0; j < 32; ++j) {
            const int c = half * 32 + spread(j, 32, r, half), key = k0 + c;
            const bool kept = key <= qi && key < seq && qi < seq;
            const float p = kept ? expf(scores[r * score_ld + c] * scale - lse_i) : 0.0f;
            dscores[r * prob_ld + c] = from_float<bf16>(p * (dprobs[r * score_ld + c] - delta_i));
        }
        __syncwarp();
        accumulate_probs_times_tile<D>(dq, dscores, k_tile);
    }
    store_rows<D>(dq, scale, scores, dqkv + v.h * D, stride, q0 + warp * frag, v);
}

}  // namespace flash

}  // namespace weft::exec::cuda_detail
