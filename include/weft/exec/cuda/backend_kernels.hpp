// The kernels exec::cuda launches, as plain host declarations: fp32 storage for activations
// and state, fp32 arithmetic. Their definitions (weft/exec/cuda/backend_kernels.cu, which
// instantiates the kernel templates of weft/exec/cuda/kernels/) are compiled once per program
// by nvcc; everything else, the engine included, stays with the host compiler.
//
// CMake: link weft::cuda_backend, which adds backend_kernels.cu to the target's sources
// (the target's project must enable the CUDA language). Without CMake: compile
// backend_kernels.cu with nvcc into one object of the program.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace weft::cuda::launch {

void to_bf16(const float* in, __nv_bfloat16* out, std::size_t n, cudaStream_t stream);
void add(const float* a, const float* b, float* out, std::size_t n, cudaStream_t stream);
void gelu_forward(const float* x, float* y, std::size_t n, cudaStream_t stream);
void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n, cudaStream_t stream);

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int rows, int cols, float eps, cudaStream_t stream);
void layer_norm_backward_input(const float* x, const float* mean, const float* rstd, const float* gamma,
                               const float* dy, float* dx, int rows, int cols, cudaStream_t stream);
void layer_norm_backward_weight(const float* x, const float* mean, const float* rstd, const float* dy, float* dgamma,
                                float* dbeta, int rows, int cols, cudaStream_t stream);

// db += column sums of dy [rows, cols].
void bias_grad(const float* dy, float* db, int rows, int cols, cudaStream_t stream);

// Per-row losses and dlogits = scale / rows (softmax - onehot); then *out = mean of the losses.
void cross_entropy(const float* logits, const std::int32_t* labels, float* losses, float* dlogits, int rows,
                   int classes, float scale, cudaStream_t stream);
void mean(const float* values, int n, float* out, cudaStream_t stream);

void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, int sequences,
                       int seq_len, int width, int vocab, cudaStream_t stream);
void embedding_backward(const std::int32_t* tokens, const float* dy, float* dwte, float* dwpe, int sequences,
                        int seq_len, int width, int vocab, cudaStream_t stream);

// Causal attention over qkv [batch * seq, 3 * heads * head_dim]; lse [batch, heads, seq].
void attention_forward(const float* qkv, float* out, float* lse, int batch, int seq, int heads, int head_dim,
                       cudaStream_t stream);
void attention_backward(const float* qkv, const float* out, const float* dout, const float* lse, float* delta,
                        float* dqkv, int batch, int seq, int heads, int head_dim, cudaStream_t stream);

}  // namespace weft::cuda::launch
