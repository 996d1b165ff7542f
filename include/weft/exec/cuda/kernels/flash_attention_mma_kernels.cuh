// The kernels of causal self-attention with the scores in registers (FlashAttention-2's
// design); flash_attention_mma.cuh launches them. The same inputs, outputs and saved state as
// flash_attention.cuh's, the kernels exec::cuda runs by default; exec::cuda runs these with
// set_attention_kernel(attention_kernel::mma) (train_gpt --attention-kernel mma). They have
// not run on a GPU yet; they become the default once gpu-check shows them right and faster
// (docs/cuda-status.md, "Attention at tensor-core speed").
//
// Why it should be faster: the WMMA kernels cannot see which lane holds which element of a
// fragment, so every 16 x 64 block of scores goes to shared memory and back for the softmax,
// two lanes a row. mma.sync's fragment layout is documented (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"), so here the softmax runs on the accumulators where the product left them,
// and the fp32 accumulator of one product is, rounded to bf16, the A operand of the next
// (the probabilities of 16 keys are exactly the A fragment of a k = 16 step). Shared memory
// holds only the input tiles, loaded with cp.async one key tile ahead of the products, and
// read into fragments with ldmatrix (.trans where a row-major tile is the B operand).
//
// Layout: qkv [batch*seq, 3*C] holds q, k, v along the features, head h at columns h*D; out
// and dout [batch*seq, C]; lse and delta [batch, heads, seq] fp32. Head sizes 32, 64, 96 and
// 128; any sequence length (tiles past the end are zero-filled and masked). A block of 4 warps
// takes one 64-row tile (of queries, or of keys), each warp 16 of its rows. Backward runs
// without atomics, as flash_attention.cuh's does: one kernel per key tile (dK, dV) and one
// per query tile (dQ), so results repeat bit for bit.
//
// The kernels compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block
// (simt_emulation.hpp) against the double reference in CI (under both sanitizers), without a GPU.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/kernels/flash_tiles.cuh"
#include "weft/exec/cuda/mma_fragments.hpp"

namespace weft::exec::cuda_detail {

namespace flash_mma {

using flash::head_ld;
using flash::head_view;
using flash::heaviest_first;
using flash::tile;
using flash::view_of_block;
constexpr int threads = flash::threads;
constexpr int rows_per_warp = 16;      // mma's m
constexpr int key_steps = tile / 16;   // k = 16 steps over a tile's 64 keys (or queries)
constexpr int score_tiles = tile / 8;  // n = 8 tiles of a warp's 16 x 64 scores
constexpr float log2e = 1.4426950408889634f;
constexpr float ln2 = 0.6931471805599453f;
constexpr float infinity = std::numeric_limits<float>::infinity();

// ---- PTX wrappers: sm_80 and newer (weft builds for 90 unless told otherwise) ----------

// Under a host compiler each calls its emulation (simt_emulation.hpp), which tests run.

// 16 bytes global -> shared without passing through registers; `bytes` 0 fills zeros (rows
// past the sequence's end), and then `source` is not read.
__device__ inline void copy_16_async(void* destination, const void* source, int bytes) {
#if defined(__CUDACC__)
    const auto to = static_cast<unsigned>(__cvta_generic_to_shared(destination));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(source), "r"(bytes));
#else
    simt::copy_16_async(destination, source, bytes);
#endif
}
__device__ inline void commit_copies() {
#if defined(__CUDACC__)
    asm volatile("cp.async.commit_group;\n" ::);
#else
    simt::commit_copies();
#endif
}
// Waits until at most `Pending` committed groups are still in flight.
template <int Pending>
__device__ inline void wait_copies() {
#if defined(__CUDACC__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
#else
    simt::wait_copies(Pending);
#endif
}

// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of
// matrix l / 8 and receives, of matrix i, the pair at row l / 4, columns 2 (l % 4) and + 1
// (with .trans: of the transposed matrix). Which row each lane points at: mma_fragments.hpp.
__device__ inline void load_matrices(unsigned (&r)[4], const bf16* shared_row) {
#if defined(__CUDACC__)
    const auto at = static_cast<unsigned>(__cvta_generic_to_shared(shared_row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
#else
    simt::load_matrices(r, shared_row, false);
#endif
}
__device__ inline void load_matrices_transposed(unsigned (&r)[4], const bf16* shared_row) {
#if defined(__CUDACC__)
    const auto at = static_cast<unsigned>(__cvta_generic_to_shared(shared_row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
#else
    simt::load_matrices(r, shared_row, true);
#endif
}

// d (16 x 8 fp32) += a (16 x 16 bf16, row-major) b (16 x 8 bf16, column-major); which lane
// holds which element: mma_fragments::a_operand, b_operand and accumulator.
__device__ inline void multiply_add(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDACC__)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    simt::multiply_add(d, a, b0, b1);
#endif
}

// Two floats as the bf16 pair of one register, the first in the low half (the lower column).
__device__ inline unsigned pack_bf16(float low, float high) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
#if defined(__CUDACC__)
    return *reinterpret_cast<const unsigned*>(&pair);
#else
    unsigned bits = 0;  // a host compiler may assume a bfloat162 and an unsigned never alias
    std::memcpy(&bits, &pair, sizeof bits);
    return bits;
#endif
}

// The A fragment of keys [16 j, 16 j + 16) from the accumulators of score tiles 2j and 2j + 1:
// the lane's pairs sit where a k = 16 step wants them (mma_fragments::accumulator_tile).
__device__ inline void scores_as_a(unsigned (&a)[4], const float (&s)[score_tiles][4], int j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float(&from)[4] = s[2 * j + mma_fragments::accumulator_tile(r)];
        const int e = mma_fragments::accumulator_element(r);
        a[r] = pack_bf16(from[e], from[e + 1]);
    }
}

// ---- tiles and fragments --------------------------------------------------------------
// Which lane holds which element, and which row each lane hands ldmatrix, is
// mma_fragments.hpp's: tests/exec/mma_fragments_test.cpp checks it against the PTX ISA.

// Rows [first, first + 64) of one head's D columns (`column`: the head's column of row 0;
// `stride` elements a row) into shared [64][D + 8], asynchronously; rows past the sequence's
// end are zeros. Rows D + 8 elements apart put ldmatrix's eight row reads on distinct banks.
template <int D>
__device__ inline void load_tile_async(bf16* shared_tile, const bf16* column, std::size_t stride, int first,
                                       const head_view& v) {
    constexpr int vectors = D / 8;
    for (int i = int(threadIdx.x); i < tile * vectors; i += threads) {
        const int r = i / vectors, c = (i % vectors) * 8;
        const bool inside = first + r < v.seq;
        const bf16* source = inside ? column + v.row(first + r) * stride + c : column;
        copy_16_async(shared_tile + r * head_ld<D> + c, source, inside ? 16 : 0);
    }
}

// A warp's 16 rows of a shared 64 x D tile as D / 16 A fragments.
template <int D>
__device__ inline void load_rows(unsigned (&rows)[D / 16][4], const bf16* shared_tile, int warp) {
    const mma_fragments::element at = mma_fragments::a_rows(int(threadIdx.x) % 32);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        load_matrices(rows[kk], shared_tile + (warp * rows_per_warp + at.row) * head_ld<D> + kk * 16 + at.col);
}

// s (the warp's 16 x 64) = rows (16 x D) times the transpose of a shared 64 x D tile: B's
// columns are the tile's rows, read as stored (no .trans).
template <int D>
__device__ inline void rows_times_tile_transposed(float (&s)[score_tiles][4], const unsigned (&rows)[D / 16][4],
                                                  const bf16* shared_tile) {
    const mma_fragments::element at = mma_fragments::b_pair_from_rows(int(threadIdx.x) % 32);
#pragma unroll
    for (int n = 0; n < score_tiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int pair = 0; pair < score_tiles / 2; ++pair) {
            // the block of rows 16 pair.. and columns 16 kk..: b0, b1 of tiles 2 pair and 2 pair + 1
            unsigned b[4];
            load_matrices(b, shared_tile + (pair * 16 + at.row) * head_ld<D> + kk * 16 + at.col);
            multiply_add(s[2 * pair], rows[kk], b[0], b[1]);
            multiply_add(s[2 * pair + 1], rows[kk], b[2], b[3]);
        }
    }
}

// sums (the warp's 16 x D) += p (16 x 64, as A fragments from accumulators) times a shared
// 64 x D tile: B is the row-major tile, read transposed.
template <int D>
__device__ inline void accumulate_times_tile(float (&sums)[D / 8][4], const float (&p)[score_tiles][4],
                                             const bf16* shared_tile) {
    const mma_fragments::element at = mma_fragments::b_pair_from_columns(int(threadIdx.x) % 32);
#pragma unroll
    for (int j = 0; j < key_steps; ++j) {
        unsigned a[4];
        scores_as_a(a, p, j);
#pragma unroll
        for (int pair = 0; pair < D / 16; ++pair) {
            // the block of rows 16 j.. and columns 16 pair.., transposed: b0, b1 of output
            // tiles 2 pair and 2 pair + 1
            unsigned b[4];
            load_matrices_transposed(b, shared_tile + (j * 16 + at.row) * head_ld<D> + pair * 16 + at.col);
            multiply_add(sums[2 * pair], a, b[0], b[1]);
            multiply_add(sums[2 * pair + 1], a, b[2], b[3]);
        }
    }
}

// Writes a warp's 16 x D accumulators times `scale` (per row: scale[half] for the lane's
// elements 2 half and 2 half + 1) as bf16 to the rows of `column` (as in load_tile_async) from
// `first`, leaving out rows past the end.
template <int D>
__device__ inline void store_rows(const float (&sums)[D / 8][4], const float (&scale)[2], bf16* column,
                                  std::size_t stride, int first, const head_view& v) {
    const int lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const mma_fragments::element at = mma_fragments::accumulator(lane, 2 * half);
        const int row = first + at.row;
        if (row >= v.seq) continue;
        bf16* out = column + v.row(row) * stride + at.col;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<__nv_bfloat162*>(out + n * 8) =
                __floats2bfloat162_rn(sums[n][2 * half] * scale[half], sums[n][2 * half + 1] * scale[half]);
    }
}

template <int D>
__device__ inline void zero(float (&sums)[D / 8][4]) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) sums[n][0] = sums[n][1] = sums[n][2] = sums[n][3] = 0.0f;
}

// A key (or query) tile needs masking where it holds the diagonal or runs past the end.
__device__ inline bool tile_needs_mask(int query_first, int key_first, int seq, bool diagonal) {
    return diagonal || query_first + tile > seq || key_first + tile > seq;
}

// The two tiles a kernel walks through step by step (k and v, or q and dout), each in two
// shared buffers: step i's pair sits in buffer i % 2 while step i + 1's loads into the other.
template <int D>
struct streamed_pair {
    bf16* first_tiles;  // [2][64][D + 8]
    bf16* second_tiles;
    const bf16* first_column;  // as in load_tile_async
    std::size_t first_stride;
    const bf16* second_column;
    std::size_t second_stride;

    // Starts the loads of rows [row, row + 64) into buffer `buffer` (uncommitted).
    __device__ void load(int buffer, int row, const head_view& v) const {
        load_tile_async<D>(first_tiles + buffer * tile * head_ld<D>, first_column, first_stride, row, v);
        load_tile_async<D>(second_tiles + buffer * tile * head_ld<D>, second_column, second_stride, row, v);
    }
    // Step `step`'s pair (rows from `row`) ready for every warp, the next step's (if `more`)
    // loading meanwhile; `also_next(buffer)` stores what else the next step needs into its
    // buffer while the copies fly. The caller ends each step with a barrier, so that no warp
    // still reads the buffer the next call refills.
    template <class AlsoNext>
    __device__ void wait_for(int step, int row, bool more, const head_view& v, AlsoNext&& also_next) const {
        if (more) {
            load(1 - step % 2, row + tile, v);
            commit_copies();
            also_next(1 - step % 2);
            wait_copies<1>();
        } else {
            wait_copies<0>();
        }
        __syncthreads();
    }
    __device__ void wait_for(int step, int row, bool more, const head_view& v) const {
        wait_for(step, row, more, v, [](int) {});
    }
    [[nodiscard]] __device__ const bf16* first(int step) const { return first_tiles + step % 2 * tile * head_ld<D>; }
    [[nodiscard]] __device__ const bf16* second(int step) const { return second_tiles + step % 2 * tile * head_ld<D>; }
};

// ---- forward ----------------------------------------------------------------------------

template <int D>
constexpr std::size_t forward_shared_bytes() {
    return 5 * std::size_t(tile) * head_ld<D> * sizeof(bf16);  // q, and k and v twice (one ahead)
}

// One block per (query tile, head, batch). Scores are kept in log2 units (scale log2 e
// folded in), so the softmax's exponentials are exp2.
template <int D>
__global__ void __launch_bounds__(threads)
    forward_kernel(const bf16* qkv, bf16* out, float* lse, int seq, int heads, float scale_log2) {
    WEFT_DYNAMIC_SHARED_MEMORY(shared);
    constexpr int ld = head_ld<D>;
    bf16* q_tile = reinterpret_cast<bf16*>(shared);
    bf16* k_tiles = q_tile + tile * ld;  // [2][64][ld]
    bf16* v_tiles = k_tiles + 2 * tile * ld;

    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const head_view v = view_of_block(seq, heads);
    const int C = heads * D;
    const std::size_t stride = 3 * std::size_t(C);
    const int query_tile = heaviest_first(), q0 = query_tile * tile;
    const int warp_row0 = q0 + warp * rows_per_warp;  // the lane's rows: + accumulator(lane, e).row
    const streamed_pair<D> keys{k_tiles, v_tiles, qkv + C + v.h * D, stride, qkv + 2 * C + v.h * D, stride};

    load_tile_async<D>(q_tile, qkv + v.h * D, stride, q0, v);
    keys.load(0, 0, v);
    commit_copies();

    unsigned q[D / 16][4];
    float o[D / 8][4];
    zero<D>(o);
    float m[2] = {-infinity, -infinity};  // running row max, log2 units
    float l[2] = {0.0f, 0.0f};            // the lane's part of the row sums

    for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {  // causal: no key after the tile's last query
        const int k0 = key_tile * tile;
        keys.wait_for(key_tile, k0, key_tile < query_tile, v);
        if (key_tile == 0) load_rows<D>(q, q_tile, warp);
        const bf16* k_tile = keys.first(key_tile);
        const bf16* v_tile = keys.second(key_tile);

        float s[score_tiles][4];
        rows_times_tile_transposed<D>(s, q, k_tile);
        const bool masked = tile_needs_mask(q0, k0, seq, key_tile == query_tile);
#pragma unroll
        for (int n = 0; n < score_tiles; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const mma_fragments::element at = mma_fragments::accumulator(lane, e);
                const int key = k0 + n * 8 + at.col, row = warp_row0 + at.row;
                s[n][e] = masked && (key > row || key >= seq) ? -infinity : s[n][e] * scale_log2;
            }

        // Online softmax. Key k0 <= row is in every tile visited, so every row has a finite
        // max (a padded row's, of zero-filled queries, is never stored).
        float rescale[2], shift[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float tile_max = -infinity;
#pragma unroll
            for (int n = 0; n < score_tiles; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));  // the row's 4 lanes
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
            const float m_new = fmaxf(m[half], tile_max);
            shift[half] = m_new == -infinity ? 0.0f : m_new;
            rescale[half] = exp2f(m[half] - shift[half]);  // 0 on the first tile
            m[half] = m_new;
        }
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < score_tiles; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[n][e] = exp2f(s[n][e] - shift[e / 2]);
                sum[e / 2] += s[n][e];
            }
#pragma unroll
        for (int half = 0; half < 2; ++half) l[half] = rescale[half] * l[half] + sum[half];
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[n][e] *= rescale[e / 2];

        accumulate_times_tile<D>(o, s, v_tile);  // o += p v, p rounded to bf16 as it enters the product
        __syncthreads();                         // every warp is done with this buffer before it refills
    }

    float inverse[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float total = l[half] + __shfl_xor_sync(0xffffffffu, l[half], 1);
        total += __shfl_xor_sync(0xffffffffu, total, 2);
        inverse[half] = total > 0.0f ? 1.0f / total : 0.0f;
        const int row = warp_row0 + mma_fragments::accumulator(lane, 2 * half).row;
        if (lane % 4 == 0 && row < seq) lse[v.stat(row)] = (m[half] + log2f(total)) * ln2;  // one of the row's 4 lanes
    }
    store_rows<D>(o, inverse, out + v.h * D, std::size_t(C), warp_row0, v);
}

// ---- backward ---------------------------------------------------------------------------

template <int D>
constexpr std::size_t key_value_shared_bytes() {
    // k and v (the block's rows, staged once), q and dout twice (one ahead), and the query
    // tiles' lse and delta twice.
    return 6 * std::size_t(tile) * head_ld<D> * sizeof(bf16) + 4 * std::size_t(tile) * sizeof(float);
}

// lse (times log2 e, for exp2) and delta of the queries [first, first + 64) into shared
// memory; 0 past the end, where the queries are masked.
__device__ inline void load_statistics(float* lse_tile, float* delta_tile, const float* lse, const float* delta,
                                       int first, const head_view& v) {
    for (int i = int(threadIdx.x); i < tile; i += threads) {
        const bool inside = first + i < v.seq;
        lse_tile[i] = inside ? lse[v.stat(first + i)] * log2e : 0.0f;
        delta_tile[i] = inside ? delta[v.stat(first + i)] : 0.0f;
    }
}

// One block per (key tile, head, batch): dK = scale sum_i dS_ij q_i and dV = sum_i p_ij dout_i
// over the queries i >= j, transposed: a warp's 16 keys are the rows of S^T = K Q^T.
template <int D>
__global__ void __launch_bounds__(threads)
    backward_key_value_kernel(const bf16* qkv, const bf16* dout, const float* lse, const float* delta, bf16* dqkv,
                              int seq, int heads, float scale, float scale_log2) {
    WEFT_DYNAMIC_SHARED_MEMORY(shared);
    constexpr int ld = head_ld<D>;
    bf16* k_stage = reinterpret_cast<bf16*>(shared);
    bf16* v_stage = k_stage + tile * ld;
    bf16* q_tiles = v_stage + tile * ld;                                      // [2][64][ld]
    bf16* dout_tiles = q_tiles + 2 * tile * ld;                               // [2][64][ld]
    float* lse_tiles = reinterpret_cast<float*>(dout_tiles + 2 * tile * ld);  // [2][64]
    float* delta_tiles = lse_tiles + 2 * tile;                                // [2][64]

    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const head_view v = view_of_block(seq, heads);
    const int C = heads * D;
    const std::size_t stride = 3 * std::size_t(C);
    const int key_tile = int(blockIdx.z), k0 = key_tile * tile;  // key tile 0 has the most queries after it
    const int query_tiles = (seq + tile - 1) / tile;
    const int warp_key0 = k0 + warp * rows_per_warp;  // the lane's keys: + accumulator(lane, e).row
    const streamed_pair<D> queries{q_tiles, dout_tiles, qkv + v.h * D, stride, dout + v.h * D, std::size_t(C)};

    load_tile_async<D>(k_stage, qkv + C + v.h * D, stride, k0, v);
    load_tile_async<D>(v_stage, qkv + 2 * C + v.h * D, stride, k0, v);
    queries.load(0, k0, v);
    commit_copies();
    load_statistics(lse_tiles, delta_tiles, lse, delta, k0, v);

    float dk[D / 8][4], dv[D / 8][4];
    zero<D>(dk);
    zero<D>(dv);

    for (int query_tile = key_tile; query_tile < query_tiles; ++query_tile) {
        const int step = query_tile - key_tile, buffer = step % 2, q0 = query_tile * tile;
        const bool more = query_tile + 1 < query_tiles;
        queries.wait_for(step, q0, more, v, [&](int next) {  // the next tile's statistics too
            load_statistics(lse_tiles + next * tile, delta_tiles + next * tile, lse, delta, q0 + tile, v);
        });
        const bf16* q_tile = queries.first(step);
        const bf16* dout_tile = queries.second(step);
        const float* lse_tile = lse_tiles + buffer * tile;
        const float* delta_tile = delta_tiles + buffer * tile;

        float p[score_tiles][4], ds[score_tiles][4];
        {
            // The keys and values are read again from shared memory for each tile: held in
            // registers beside dk and dv they spilled at D = 128 (256 registers live).
            unsigned keys[D / 16][4];
            load_rows<D>(keys, k_stage, warp);
            rows_times_tile_transposed<D>(p, keys, q_tile);  // k_j . q_i
        }
        {
            unsigned values[D / 16][4];
            load_rows<D>(values, v_stage, warp);
            rows_times_tile_transposed<D>(ds, values, dout_tile);  // v_j . dout_i
        }
        const bool masked = tile_needs_mask(q0, k0, seq, query_tile == key_tile);
#pragma unroll
        for (int n = 0; n < score_tiles; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const mma_fragments::element at = mma_fragments::accumulator(lane, e);
                const int c = n * 8 + at.col, query = q0 + c, key = warp_key0 + at.row;
                const bool dropped = masked && (query < key || query >= seq || key >= seq);
                const float probability = dropped ? 0.0f : exp2f(p[n][e] * scale_log2 - lse_tile[c]);
                p[n][e] = probability;
                ds[n][e] = probability * (ds[n][e] - delta_tile[c]);
            }
        accumulate_times_tile<D>(dv, p, dout_tile);
        accumulate_times_tile<D>(dk, ds, q_tile);
        __syncthreads();  // every warp is done with this buffer before it refills
    }
    const float key_scale[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
    store_rows<D>(dk, key_scale, dqkv + C + v.h * D, stride, warp_key0, v);
    store_rows<D>(dv, one, dqkv + 2 * C + v.h * D, stride, warp_key0, v);
}

template <int D>
constexpr std::size_t query_shared_bytes() {
    return 6 * std::size_t(tile) * head_ld<D> * sizeof(bf16);  // q and dout staged, k and v twice
}

// One block per (query tile, head, batch): dQ = scale sum_j dS_ij k_j over the keys j <= i.
template <int D>
__global__ void __launch_bounds__(threads)
    backward_query_kernel(const bf16* qkv, const bf16* dout, const float* lse, const float* delta, bf16* dqkv, int seq,
                          int heads, float scale, float scale_log2) {
    WEFT_DYNAMIC_SHARED_MEMORY(shared);
    constexpr int ld = head_ld<D>;
    bf16* q_stage = reinterpret_cast<bf16*>(shared);
    bf16* dout_stage = q_stage + tile * ld;
    bf16* k_tiles = dout_stage + tile * ld;  // [2][64][ld]
    bf16* v_tiles = k_tiles + 2 * tile * ld;

    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const head_view v = view_of_block(seq, heads);
    const int C = heads * D;
    const std::size_t stride = 3 * std::size_t(C);
    const int query_tile = heaviest_first(), q0 = query_tile * tile;
    const int warp_row0 = q0 + warp * rows_per_warp;
    const streamed_pair<D> keys{k_tiles, v_tiles, qkv + C + v.h * D, stride, qkv + 2 * C + v.h * D, stride};

    load_tile_async<D>(q_stage, qkv + v.h * D, stride, q0, v);
    load_tile_async<D>(dout_stage, dout + v.h * D, std::size_t(C), q0, v);
    keys.load(0, 0, v);
    commit_copies();

    float lse_row[2], delta_row[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = warp_row0 + mma_fragments::accumulator(lane, 2 * half).row;
        lse_row[half] = row < seq ? lse[v.stat(row)] * log2e : 0.0f;
        delta_row[half] = row < seq ? delta[v.stat(row)] : 0.0f;
    }
    unsigned q[D / 16][4], d_out[D / 16][4];
    float dq[D / 8][4];
    zero<D>(dq);

    for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
        const int k0 = key_tile * tile;
        keys.wait_for(key_tile, k0, key_tile < query_tile, v);
        if (key_tile == 0) {
            load_rows<D>(q, q_stage, warp);
            load_rows<D>(d_out, dout_stage, warp);
        }
        const bf16* k_tile = keys.first(key_tile);
        const bf16* v_tile = keys.second(key_tile);

        float p[score_tiles][4], ds[score_tiles][4];
        rows_times_tile_transposed<D>(p, q, k_tile);       // q_i . k_j
        rows_times_tile_transposed<D>(ds, d_out, v_tile);  // dout_i . v_j
        const bool masked = tile_needs_mask(q0, k0, seq, key_tile == query_tile);
#pragma unroll
        for (int n = 0; n < score_tiles; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const mma_fragments::element at = mma_fragments::accumulator(lane, e);
                const int key = k0 + n * 8 + at.col, row = warp_row0 + at.row;
                const bool dropped = masked && (key > row || key >= seq || row >= seq);
                const float probability = dropped ? 0.0f : exp2f(p[n][e] * scale_log2 - lse_row[e / 2]);
                ds[n][e] = probability * (ds[n][e] - delta_row[e / 2]);
            }
        accumulate_times_tile<D>(dq, ds, k_tile);
        __syncthreads();
    }
    const float query_scale[2] = {scale, scale};
    store_rows<D>(dq, query_scale, dqkv + v.h * D, stride, warp_row0, v);
}

}  // namespace flash_mma

}  // namespace weft::exec::cuda_detail
