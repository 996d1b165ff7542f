// The kernels exec::cuda launches, as plain host declarations: bf16 activations, fp32
// weights, gradients and saved statistics, fp32 arithmetic. Their definitions
// (weft/exec/cuda/backend_kernels.cu, which instantiates the kernel templates of
// weft/exec/cuda/kernels/) are compiled once per program by nvcc; everything else, the
// engine included, stays with the host compiler.
//
// CMake: link weft::cuda_backend, which adds backend_kernels.cu to the target's sources
// (the target's project must enable the CUDA language). Without CMake: compile
// backend_kernels.cu with nvcc into one object of the program.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "weft/exec/cuda/optimizer_step_types.hpp"
#include "weft/optim/adamw_factors.hpp"
#include "weft/optim/sgd_update.hpp"

namespace weft::exec::cuda_detail {

// Which causal-attention kernels exec::cuda runs: wmma (kernels/flash_attention.cuh, the
// default, run on an H200 before its latest grid changes) or mma
// (kernels/flash_attention_mma.cuh, scores in registers, built and tested but not yet run on
// a GPU; docs/cuda-status.md).
enum class attention_kernel { wmma, mma };

}  // namespace weft::exec::cuda_detail

namespace weft::exec::cuda_detail::launch {

using bf16 = __nv_bfloat16;

// Rounds to nearest even (the GEMMs' bf16 weights, a host matrix going up); widens exactly.
void to_bf16(const float* in, bf16* out, std::size_t n, cudaStream_t stream);
void to_float(const bf16* in, float* out, std::size_t n, cudaStream_t stream);
// out[i] = in[i] + addend[i % period] in fp32, rounded to nearest even (period divides n): a
// row bias (period: the width) or the position embedding (period: seq_len * width).
void to_bf16_adding_periodic(const float* in, const float* addend, std::size_t period, bf16* out, std::size_t n,
                             cudaStream_t stream);

void add(const bf16* a, const bf16* b, bf16* out, std::size_t n, cudaStream_t stream);
void gelu_forward(const bf16* x, bf16* y, std::size_t n, cudaStream_t stream);
void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, std::size_t n, cudaStream_t stream);

void layer_norm_forward(const bf16* x, const float* gamma, const float* beta, bf16* y, float* mean, float* rstd,
                        int rows, int cols, float eps, cudaStream_t stream);
void residual_layer_norm_forward(const bf16* a, const bf16* b, bf16* sum, const float* gamma, const float* beta,
                                 bf16* y, float* mean, float* rstd, int rows, int cols, float eps,
                                 cudaStream_t stream);
void layer_norm_backward_input(const bf16* x, const float* mean, const float* rstd, const float* gamma, const bf16* dy,
                               bf16* dx, int rows, int cols, cudaStream_t stream);
// `partials`: column_sum_scratch_floats(rows, cols, 2) floats of scratch
// (weft/exec/cuda/column_sums_layout.hpp).
void layer_norm_backward_weight(const bf16* x, const float* mean, const float* rstd, const bf16* dy, float* dgamma,
                                float* dbeta, float* partials, int rows, int cols, cudaStream_t stream);

// db += column sums of dy [rows, cols]; `partials`: column_sum_scratch_floats(rows, cols, 1) floats.
void bias_grad(const bf16* dy, float* db, float* partials, int rows, int cols, cudaStream_t stream);

// Per-row losses and dlogits = scale / rows (softmax - onehot); then *out = mean of the losses.
void cross_entropy(const bf16* logits, const std::int32_t* labels, float* losses, bf16* dlogits, int rows, int classes,
                   float scale, cudaStream_t stream);
void mean(const float* values, int n, float* out, cudaStream_t stream);
// The vocabulary-parallel loss's passes (kernels/vocab_parallel_loss.cuh): max [rows];
// sums [2 * rows]; d [rows, cols].
void row_max(const bf16* logits, float* max, int rows, int cols, cudaStream_t stream);
void softmax_partial_sums(const bf16* logits, const float* max, const std::int32_t* labels, int first_column,
                          float* sums, int rows, int cols, cudaStream_t stream);
void softmax_gradient(const bf16* logits, const float* max, const float* sums, const std::int32_t* labels,
                      int first_column, float row_scale, bf16* d, int rows, int cols, cudaStream_t stream);
// Between them, on the GPU: max [n] of the gathered maxima all [blocks * n]; terms [n] of
// each row's loss from the summed sums [2 * n].
void max_over_blocks(const float* all, int n, int blocks, float* max, cudaStream_t stream);
void loss_terms(const float* sums, int n, float* terms, cudaStream_t stream);

void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, bf16* out, int sequences,
                       int seq_len, int width, int vocab, cudaStream_t stream);
// The vocabulary-parallel embedding's kernels over the wte rows [first_row, first_row +
// held_rows) a rank holds: the lookup into fp32 out (zeros for the tokens of other ranks),
// and the backward into those rows and the whole dwpe (the whole-vocabulary backward is
// this over every row).
void vocab_slice_lookup(const std::int32_t* tokens, const float* wte_rows, int first_row, int held_rows, float* out,
                        int sequences, int seq_len, int width, cudaStream_t stream);
void embedding_backward_rows(const std::int32_t* token_groups, const bf16* dy, float* dwte_rows, int first_row,
                             int held_rows, float* dwpe, int sequences, int seq_len, int width, cudaStream_t stream);

// Causal attention over qkv [batch * seq, 3 * heads * head_dim] on tensor cores, with the
// kernels `kernel` names; lse [batch, heads, seq]; head_dim 32, 64, 96 or 128.
void attention_forward(const bf16* qkv, bf16* out, float* lse, int batch, int seq, int heads, int head_dim,
                       attention_kernel kernel, cudaStream_t stream);
void attention_backward(const bf16* qkv, const bf16* out, const bf16* dout, const float* lse, float* delta, bf16* dqkv,
                        int batch, int seq, int heads, int head_dim, attention_kernel kernel, cudaStream_t stream);

// The optimizer step on fp32 state (kernels/optimizer_step.cuh): values [0, n) *= factor;
// AdamW's update of [0, n), bit for bit optim::adamw_update_on_host; SGD's, bit for bit
// optim::sgd_update_on_host (momentum_buffer: null without momentum); and the summary of
// gradients by segments.
void scale(float* values, std::size_t n, float factor, cudaStream_t stream);
void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n,
                  const optim::adamw_factors<float>& f, bool decays, cudaStream_t stream);
void sgd_update(float* params, const float* grads, float* momentum_buffer, std::size_t n,
                const optim::sgd_factors<float>& f, bool decays, cudaStream_t stream);
// Blocks per segment for the longest segment (the size of `partials`: segments x blocks).
[[nodiscard]] int summary_blocks_per_segment(std::size_t longest_segment);
void summarize_gradients(const float* values, const gradient_segment* segments, int segment_count,
                         int blocks_per_segment, double* partials, double* result, cudaStream_t stream);

}  // namespace weft::exec::cuda_detail::launch
