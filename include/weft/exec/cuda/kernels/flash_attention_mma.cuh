// Causal self-attention on mma.sync with the scores in registers: the launches of
// flash_attention_mma_kernels.cuh (which says how the kernels work and why). The same
// arguments, layout and saved state as flash_attention.cuh's, whose delta kernel and shape
// checks these share. exec::cuda runs them with set_attention_kernel(attention_kernel::mma)
// (train_gpt --attention-kernel mma); not yet the default (docs/cuda-status.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>

#include "weft/exec/cuda/kernels/flash_attention.cuh"
#include "weft/exec/cuda/kernels/flash_attention_mma_kernels.cuh"

namespace weft::exec::cuda_detail {

namespace flash_mma {

template <int D>
void forward(const bf16* qkv, bf16* out, float* lse, int batch, int seq, int heads, cudaStream_t stream) {
    constexpr std::size_t bytes = forward_shared_bytes<D>();
    flash::allow_shared_bytes(forward_kernel<D>, bytes, "flash attention (mma) forward");
    const dim3 grid(heads, batch, (seq + tile - 1) / tile);
    forward_kernel<D><<<grid, threads, bytes, stream>>>(qkv, out, lse, seq, heads, log2e / sqrtf(float(D)));
    gpu::check(cudaGetLastError(), "flash attention (mma) forward kernel launch");
}

template <int D>
void backward(const bf16* qkv, const bf16* dout, const float* lse, const float* delta, bf16* dqkv, int batch, int seq,
              int heads, cudaStream_t stream) {
    const float scale = 1.0f / sqrtf(float(D)), scale_log2 = scale * log2e;
    const dim3 grid(heads, batch, (seq + tile - 1) / tile);
    constexpr std::size_t kv_bytes = key_value_shared_bytes<D>();
    flash::allow_shared_bytes(backward_key_value_kernel<D>, kv_bytes, "flash attention (mma) backward (keys, values)");
    backward_key_value_kernel<D>
        <<<grid, threads, kv_bytes, stream>>>(qkv, dout, lse, delta, dqkv, seq, heads, scale, scale_log2);
    gpu::check(cudaGetLastError(), "flash attention (mma) backward (keys, values) kernel launch");
    constexpr std::size_t q_bytes = query_shared_bytes<D>();
    flash::allow_shared_bytes(backward_query_kernel<D>, q_bytes, "flash attention (mma) backward (queries)");
    backward_query_kernel<D>
        <<<grid, threads, q_bytes, stream>>>(qkv, dout, lse, delta, dqkv, seq, heads, scale, scale_log2);
    gpu::check(cudaGetLastError(), "flash attention (mma) backward (queries) kernel launch");
}

}  // namespace flash_mma

// As flash_attention_forward, on mma.sync with the scores in registers.
inline void flash_attention_mma_forward(const bf16* qkv, bf16* out, float* lse, int batch, int seq, int heads,
                                        int head_dim, cudaStream_t stream) {
    flash::require_shape(batch, seq, heads, head_dim, "flash_attention_mma_forward");
    flash::with_head_dim(head_dim, [&]<int D>() { flash_mma::forward<D>(qkv, out, lse, batch, seq, heads, stream); });
}

// As flash_attention_backward (dqkv written whole; delta [batch, heads, seq] is scratch).
inline void flash_attention_mma_backward(const bf16* qkv, const bf16* out, const bf16* dout, const float* lse,
                                         float* delta, bf16* dqkv, int batch, int seq, int heads, int head_dim,
                                         cudaStream_t stream) {
    flash::require_shape(batch, seq, heads, head_dim, "flash_attention_mma_backward");
    flash::launch_delta(out, dout, delta, batch, seq, heads, head_dim, "flash_attention_mma_backward", stream);
    flash::with_head_dim(
        head_dim, [&]<int D>() { flash_mma::backward<D>(qkv, dout, lse, delta, dqkv, batch, seq, heads, stream); });
}

}  // namespace weft::exec::cuda_detail
