// CUDA's warp matrix API (nvcuda::wmma, <mma.h>) for device code compiled by a host compiler
// onto the emulated thread block of simt_emulation.hpp: the WMMA flash attention kernels
// (kernels/flash_attention_kernels.cuh) run on the CPU in tests with it.
//
// WMMA leaves unspecified which lane holds which element of a fragment; code that uses it
// may only load, multiply, fill and store whole fragments (weft's kernels do only that). So
// here every lane holds the whole matrix: a load reads all of it, a product computes all of
// it (in fp32: products of bf16 are exact, sums round as the tensor cores' may), and a store
// writes each element from one lane and then waits for the warp, so the whole tile is
// written when any lane goes on. A GPU promises that only after a __syncwarp, so a kernel
// that reads a stored tile back without one passes here and races there (as a missing
// cp.async wait does: simt_emulation.hpp); gpu-check's racecheck is for those.
#pragma once

#include <cstddef>
#include <type_traits>

#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/simt_emulation.hpp"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// Use's rows x cols for the product m x n x k: A is m x k, B is k x n, the accumulator m x n.
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
    static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
    static constexpr int num_elements = rows * cols;
    float x[num_elements];  // element (r, c) at r * cols + c, on every lane
};

// An A or B fragment from memory: row_major puts element (r, c) at p[r * ldm + c], col_major
// at p[c * ldm + r].
template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned int ldm) {
    using frag = fragment<Use, M, N, K, T, Layout>;
    for (int r = 0; r < frag::rows; ++r)
        for (int c = 0; c < frag::cols; ++c)
            f.x[r * frag::cols + c] = weft::exec::cuda_detail::detail::to_float(std::is_same_v<Layout, col_major>
                                                                       ? p[std::size_t(c) * ldm + std::size_t(r)]
                                                                       : p[std::size_t(r) * ldm + std::size_t(c)]);
}

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
    for (float& e : f.x) e = value;
}

// d = a b + c.
template <int M, int N, int K, class T, class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LayoutA>& a,
              const fragment<matrix_b, M, N, K, T, LayoutB>& b, const fragment<accumulator, M, N, K, float>& c) {
    float sums[M * N];
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float sum = c.x[i * N + j];
            for (int k = 0; k < K; ++k) sum += a.x[i * K + k] * b.x[k * N + j];
            sums[i * N + j] = sum;
        }
    for (int e = 0; e < M * N; ++e) d.x[e] = sums[e];
}

// The accumulator to p: element i written by lane i % 32, then the warp waits for all.
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned int ldm, layout_t layout) {
    const int lane = weft::exec::cuda_detail::simt::lane();
    for (int e = lane; e < M * N; e += weft::exec::cuda_detail::simt::warp_size) {
        const int r = e / N, c = e % N;
        p[layout == mem_col_major ? std::size_t(c) * ldm + std::size_t(r) : std::size_t(r) * ldm + std::size_t(c)] =
            f.x[e];
    }
    __syncwarp();
}

}  // namespace nvcuda::wmma
