// Definitions of weft/exec/cuda/backend_kernels.hpp: compile once per program with nvcc
// (CMake's weft::cuda_backend adds this file to the target that links it). Each launch asks
// the thread's action recording first (weft/exec/cuda/action_recording.hpp): a graph's
// shadow queues nothing, since the graph holds the launch. What it queues is timed by name
// when the operation profile is on (weft/exec/cuda/operation_profile.hpp).
#include "weft/exec/cuda/backend_kernels.hpp"

#include "weft/exec/cuda/action_recording.hpp"
#include "weft/exec/cuda/operation_profile.hpp"

#include "weft/exec/cuda/kernels/bias_grad.cuh"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/cross_entropy.cuh"
#include "weft/exec/cuda/kernels/embedding.cuh"
#include "weft/exec/cuda/kernels/flash_attention.cuh"
#include "weft/exec/cuda/kernels/flash_attention_mma.cuh"
#include "weft/exec/cuda/kernels/gelu.cuh"
#include "weft/exec/cuda/kernels/layer_norm.cuh"
#include "weft/exec/cuda/kernels/optimizer_step.cuh"
#include "weft/exec/cuda/kernels/residual_add.cuh"
#include "weft/exec/cuda/kernels/vocab_parallel_loss.cuh"

namespace weft::exec::cuda_detail::launch {

void to_bf16(const float* in, bf16* out, std::size_t n, cudaStream_t stream) {
    if (skip_recorded_work("to_bf16", in, out, n)) return;
    const profile_scope timed("to_bf16", stream);
    convert(in, out, n, stream);
}
void to_float(const bf16* in, float* out, std::size_t n, cudaStream_t stream) {
    if (skip_recorded_work("to_float", in, out, n)) return;
    const profile_scope timed("to_float", stream);
    convert(in, out, n, stream);
}
void to_bf16_adding_periodic(const float* in, const float* addend, std::size_t period, bf16* out, std::size_t n,
                             cudaStream_t stream) {
    if (skip_recorded_work("to_bf16_adding_periodic", in, addend, period, out, n)) return;
    const profile_scope timed("to_bf16_adding_periodic", stream);
    convert_adding_periodic(in, addend, period, out, n, stream);
}
void add(const bf16* a, const bf16* b, bf16* out, std::size_t n, cudaStream_t stream) {
    if (skip_recorded_work("add", a, b, out, n)) return;
    const profile_scope timed("add", stream);
    residual_add(a, b, out, n, stream);
}
void gelu_forward(const bf16* x, bf16* y, std::size_t n, cudaStream_t stream) {
    if (skip_recorded_work("gelu_forward", x, y, n)) return;
    const profile_scope timed("gelu_forward", stream);
    weft::exec::cuda_detail::gelu_forward(x, y, n, stream);
}
void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, std::size_t n, cudaStream_t stream) {
    if (skip_recorded_work("gelu_backward", x, dy, dx, n)) return;
    const profile_scope timed("gelu_backward", stream);
    weft::exec::cuda_detail::gelu_backward(x, dy, dx, n, stream);
}

void layer_norm_forward(const bf16* x, const float* gamma, const float* beta, bf16* y, float* mean, float* rstd,
                        int rows, int cols, float eps, cudaStream_t stream) {
    if (skip_recorded_work("layer_norm_forward", x, gamma, beta, y, mean, rstd, rows, cols, eps)) return;
    const profile_scope timed("layer_norm_forward", stream);
    weft::exec::cuda_detail::layer_norm_forward(x, gamma, beta, y, mean, rstd, rows, cols, eps, stream);
}
void residual_layer_norm_forward(const bf16* a, const bf16* b, bf16* sum, const float* gamma, const float* beta,
                                 bf16* y, float* mean, float* rstd, int rows, int cols, float eps,
                                 cudaStream_t stream) {
    if (skip_recorded_work("residual_layer_norm_forward", a, b, sum, gamma, beta, y, mean, rstd, rows, cols,
                           eps)) return;
    const profile_scope timed("residual_layer_norm_forward", stream);
    weft::exec::cuda_detail::residual_layer_norm_forward(a, b, sum, gamma, beta, y, mean, rstd, rows, cols, eps, stream);
}
void layer_norm_backward_input(const bf16* x, const float* mean, const float* rstd, const float* gamma, const bf16* dy,
                               bf16* dx, int rows, int cols, cudaStream_t stream) {
    if (skip_recorded_work("layer_norm_backward_input", x, mean, rstd, gamma, dy, dx, rows, cols)) return;
    const profile_scope timed("layer_norm_backward_input", stream);
    weft::exec::cuda_detail::layer_norm_backward_input(x, mean, rstd, gamma, dy, dx, rows, cols, stream);
}
void layer_norm_backward_weight(const bf16* x, const float* mean, const float* rstd, const bf16* dy, float* dgamma,
                                float* dbeta, float* partials, int rows, int cols, cudaStream_t stream) {
    if (skip_recorded_work("layer_norm_backward_weight", x, mean, rstd, dy, dgamma, dbeta, partials, rows, cols))
        return;
    const profile_scope timed("layer_norm_backward_weight", stream);
    weft::exec::cuda_detail::layer_norm_backward_weight(x, mean, rstd, dy, dgamma, dbeta, partials, rows, cols, stream);
}

void bias_grad(const bf16* dy, float* db, float* partials, int rows, int cols, cudaStream_t stream) {
    if (skip_recorded_work("bias_grad", dy, db, partials, rows, cols)) return;
    const profile_scope timed("bias_grad", stream);
    weft::exec::cuda_detail::bias_grad(dy, db, partials, rows, cols, stream);
}

void cross_entropy(const bf16* logits, const std::int32_t* labels, float* losses, bf16* dlogits, int rows, int classes,
                   float scale, cudaStream_t stream) {
    if (skip_recorded_work("cross_entropy", logits, labels, losses, dlogits, rows, classes, scale)) return;
    const profile_scope timed("cross_entropy", stream);
    cross_entropy_forward_backward(logits, labels, losses, dlogits, rows, classes, scale, stream);
}
void mean(const float* values, int n, float* out, cudaStream_t stream) {
    if (skip_recorded_work("mean", values, n, out)) return;
    const profile_scope timed("mean", stream);
    weft::exec::cuda_detail::mean(values, n, out, stream);
}

void row_max(const bf16* logits, float* max, int rows, int cols, cudaStream_t stream) {
    if (skip_recorded_work("row_max", logits, max, rows, cols)) return;
    const profile_scope timed("row_max", stream);
    weft::exec::cuda_detail::row_max(logits, max, rows, cols, stream);
}
void softmax_partial_sums(const bf16* logits, const float* max, const std::int32_t* labels, int first_column,
                          float* sums, int rows, int cols, cudaStream_t stream) {
    if (skip_recorded_work("softmax_partial_sums", logits, max, labels, first_column, sums, rows, cols)) return;
    const profile_scope timed("softmax_partial_sums", stream);
    weft::exec::cuda_detail::softmax_partial_sums(logits, max, labels, first_column, sums, rows, cols, stream);
}
void softmax_gradient(const bf16* logits, const float* max, const float* sums, const std::int32_t* labels,
                      int first_column, float row_scale, bf16* d, int rows, int cols, cudaStream_t stream) {
    if (skip_recorded_work("softmax_gradient", logits, max, sums, labels, first_column, row_scale, d, rows,
                           cols)) return;
    const profile_scope timed("softmax_gradient", stream);
    weft::exec::cuda_detail::softmax_gradient(logits, max, sums, labels, first_column, row_scale, d, rows, cols, stream);
}
void max_over_blocks(const float* all, int n, int blocks, float* max, cudaStream_t stream) {
    if (skip_recorded_work("max_over_blocks", all, n, blocks, max)) return;
    const profile_scope timed("max_over_blocks", stream);
    weft::exec::cuda_detail::max_over_blocks(all, n, blocks, max, stream);
}
void loss_terms(const float* sums, int n, float* terms, cudaStream_t stream) {
    if (skip_recorded_work("loss_terms", sums, n, terms)) return;
    const profile_scope timed("loss_terms", stream);
    weft::exec::cuda_detail::loss_terms(sums, n, terms, stream);
}

void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, bf16* out, int sequences,
                       int seq_len, int width, int vocab, cudaStream_t stream) {
    if (skip_recorded_work("embedding_forward", tokens, wte, wpe, out, sequences, seq_len, width, vocab)) return;
    const profile_scope timed("embedding_forward", stream);
    weft::exec::cuda_detail::embedding_forward(tokens, wte, wpe, out, sequences, seq_len, width, vocab, stream);
}
void vocab_slice_lookup(const std::int32_t* tokens, const float* wte_rows, int first_row, int held_rows, float* out,
                        int sequences, int seq_len, int width, cudaStream_t stream) {
    if (skip_recorded_work("vocab_slice_lookup", tokens, wte_rows, first_row, held_rows, out, sequences, seq_len,
                           width)) return;
    const profile_scope timed("vocab_slice_lookup", stream);
    weft::exec::cuda_detail::vocab_slice_lookup(tokens, wte_rows, first_row, held_rows, out, sequences, seq_len, width, stream);
}
void embedding_backward_rows(const std::int32_t* token_groups, const bf16* dy, float* dwte_rows, int first_row,
                             int held_rows, float* dwpe, int sequences, int seq_len, int width, cudaStream_t stream) {
    if (skip_recorded_work("embedding_backward_rows", token_groups, dy, dwte_rows, first_row, held_rows, dwpe,
                           sequences, seq_len, width)) return;
    const profile_scope timed("embedding_backward_rows", stream);
    weft::exec::cuda_detail::embedding_backward_rows(token_groups, dy, dwte_rows, first_row, held_rows, dwpe, sequences, seq_len,
                                        width, stream);
}

void attention_forward(const bf16* qkv, bf16* out, float* lse, int batch, int seq, int heads, int head_dim,
                       attention_kernel kernel, cudaStream_t stream) {
    if (skip_recorded_work("attention_forward", qkv, out, lse, batch, seq, heads, head_dim, kernel)) return;
    const profile_scope timed("attention_forward", stream);
    if (kernel == attention_kernel::mma)
        flash_attention_mma_forward(qkv, out, lse, batch, seq, heads, head_dim, stream);
    else
        flash_attention_forward(qkv, out, lse, batch, seq, heads, head_dim, stream);
}
void attention_backward(const bf16* qkv, const bf16* out, const bf16* dout, const float* lse, float* delta, bf16* dqkv,
                        int batch, int seq, int heads, int head_dim, attention_kernel kernel, cudaStream_t stream) {
    if (skip_recorded_work("attention_backward", qkv, out, dout, lse, delta, dqkv, batch, seq, heads, head_dim,
                           kernel))
        return;
    const profile_scope timed("attention_backward", stream);
    if (kernel == attention_kernel::mma)
        flash_attention_mma_backward(qkv, out, dout, lse, delta, dqkv, batch, seq, heads, head_dim, stream);
    else
        flash_attention_backward(qkv, out, dout, lse, delta, dqkv, batch, seq, heads, head_dim, stream);
}

void scale(float* values, std::size_t n, float factor, cudaStream_t stream) {
    if (skip_recorded_work("scale", values, n, factor)) return;
    const profile_scope timed("scale", stream);
    scale_exact(values, n, factor, stream);
}
void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n,
                  const optim::adamw_factors<float>& f, bool decays, cudaStream_t stream) {
    if (skip_recorded_work("adamw_update", params, grads, m, v, n, decays)) return;
    const profile_scope timed("adamw_update", stream);
    adamw_update_exact(params, grads, m, v, n, f, decays, stream);
}
void sgd_update(float* params, const float* grads, float* momentum_buffer, std::size_t n,
                const optim::sgd_factors<float>& f, bool decays, cudaStream_t stream) {
    if (skip_recorded_work("sgd_update", params, grads, momentum_buffer, n, decays)) return;
    const profile_scope timed("sgd_update", stream);
    sgd_update_exact(params, grads, momentum_buffer, n, f, decays, stream);
}
int summary_blocks_per_segment(std::size_t longest_segment) {
    return weft::exec::cuda_detail::summary_blocks_per_segment(longest_segment);
}
void summarize_gradients(const float* values, const gradient_segment* segments, int segment_count,
                         int blocks_per_segment, double* partials, double* result, cudaStream_t stream) {
    if (skip_recorded_work("summarize_gradients", values, segments, segment_count, blocks_per_segment, partials,
                           result)) return;
    const profile_scope timed("summarize_gradients", stream);
    summarize_segments(values, segments, segment_count, blocks_per_segment, partials, result, stream);
}

}  // namespace weft::exec::cuda_detail::launch
