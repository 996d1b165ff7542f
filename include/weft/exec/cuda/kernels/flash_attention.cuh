// Causal multi-head self-attention on tensor cores, flash-style: the launches of the kernels
// in flash_attention_kernels.cuh (which says how they work), with the shape checks and the
// head-size dispatch that the mma.sync kernels (flash_attention_mma.cuh) share. What
// exec::cuda runs by default.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/flash_attention_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

namespace flash {

inline void require_shape(int batch, int seq, int heads, int head_dim, const char* what) {
    const std::string name(what);
    require(batch > 0 && batch <= 65535, name + ": batch", batch, "must be in [1, 65535]");
    require(heads > 0 && heads <= 65535, name + ": heads", heads, "must be in [1, 65535]");
    // (The tiles are the grid's z dimension, at most 65535.)
    require(seq > 0 && seq <= 65535 * tile, name + ": seq", seq,
            "must be in [1, " + std::to_string(65535 * tile) + "]");
    require(head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128, name + ": head_dim", head_dim,
            "must be 32, 64, 96 or 128");
}

// fn.template operator()<D>() for the head size D = head_dim (32, 64, 96 or 128, as
// require_shape checked): the kernels' one run-time to compile-time dispatch.
template <class Fn>
void with_head_dim(int head_dim, Fn&& fn) {
    switch (head_dim) {
        case 32:
            fn.template operator()<32>();
            break;
        case 64:
            fn.template operator()<64>();
            break;
        case 96:
            fn.template operator()<96>();
            break;
        default:
            fn.template operator()<128>();
            break;
    }
}

// Backward's first step, delta = dout . out per row and head (delta_kernel), for the kernels
// `what` names (in its error, built only then: this runs on every attention backward).
inline void launch_delta(const bf16* out, const bf16* dout, float* delta, int batch, int seq, int heads, int head_dim,
                         std::string_view what, cudaStream_t stream) {
    const std::size_t rows = std::size_t(batch) * seq;
    if (rows * std::size_t(heads) > 0x3ffffffu)
        throw invalid_argument(std::string(what) + ": batch * seq * heads", rows * std::size_t(heads),
                               "must be at most 2^26 (one warp per row and head in one launch)");
    constexpr unsigned int delta_threads = 256;
    const std::size_t delta_blocks = (rows * heads * 32 + delta_threads - 1) / delta_threads;
    delta_kernel<bf16>
        <<<unsigned(delta_blocks), delta_threads, 0, stream>>>(out, dout, delta, int(rows), seq, heads, head_dim);
    gpu::check(cudaGetLastError(), "flash attention delta kernel launch");
}

// More than the default 48 KiB of shared memory per block is opt-in, per kernel.
template <class Kernel>
void allow_shared_bytes(Kernel kernel, std::size_t bytes, const char* what) {
    gpu::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
          std::string("cudaFuncSetAttribute (") + what + " shared memory)");
}

template <int D>
void forward(const bf16* qkv, bf16* out, float* lse, int batch, int seq, int heads, cudaStream_t stream) {
    constexpr std::size_t bytes = forward_shared_bytes<D>();
    allow_shared_bytes(forward_kernel<D>, bytes, "flash attention forward");
    const dim3 grid(heads, batch, (seq + tile - 1) / tile);
    forward_kernel<D><<<grid, threads, bytes, stream>>>(qkv, out, lse, seq, heads, 1.0f / sqrtf(float(D)));
    gpu::check(cudaGetLastError(), "flash attention forward kernel launch");
}

template <int D>
void backward(const bf16* qkv, const bf16* dout, const float* lse, const float* delta, bf16* dqkv, int batch, int seq,
              int heads, cudaStream_t stream) {
    const float scale = 1.0f / sqrtf(float(D));
    const dim3 grid(heads, batch, (seq + tile - 1) / tile);
    constexpr std::size_t kv_bytes = key_value_shared_bytes<D>();
    allow_shared_bytes(backward_key_value_kernel<D>, kv_bytes, "flash attention backward (keys, values)");
    backward_key_value_kernel<D><<<grid, threads, kv_bytes, stream>>>(qkv, dout, lse, delta, dqkv, seq, heads, scale);
    gpu::check(cudaGetLastError(), "flash attention backward (keys, values) kernel launch");
    constexpr std::size_t q_bytes = query_shared_bytes<D>();
    allow_shared_bytes(backward_query_kernel<D>, q_bytes, "flash attention backward (queries)");
    backward_query_kernel<D><<<grid, threads, q_bytes, stream>>>(qkv, dout, lse, delta, dqkv, seq, heads, scale);
    gpu::check(cudaGetLastError(), "flash attention backward (queries) kernel launch");
}

}  // namespace flash

// out = softmax(mask(q k^T / sqrt(head_dim))) v per (batch, head); lse saved for backward.
inline void flash_attention_forward(const bf16* qkv, bf16* out, float* lse, int batch, int seq, int heads, int head_dim,
                                    cudaStream_t stream) {
    flash::require_shape(batch, seq, heads, head_dim, "flash_attention_forward");
    flash::with_head_dim(head_dim, [&]<int D>() { flash::forward<D>(qkv, out, lse, batch, seq, heads, stream); });
}

// dqkv (same layout as qkv) is written whole from what forward saved (out, lse); delta
// [batch, heads, seq] is scratch.
inline void flash_attention_backward(const bf16* qkv, const bf16* out, const bf16* dout, const float* lse, float* delta,
                                     bf16* dqkv, int batch, int seq, int heads, int head_dim, cudaStream_t stream) {
    flash::require_shape(batch, seq, heads, head_dim, "flash_attention_backward");
    flash::launch_delta(out, dout, delta, batch, seq, heads, head_dim, "flash_attention_backward", stream);
    flash::with_head_dim(head_dim, [&]<int D>() {
        flash::backward<D>(qkv, dout, lse, delta, dqkv, batch, seq, heads, stream);
    });
}

}  // namespace weft::exec::cuda_detail
