// The compute_backend concept: what nn/ layers, the models and the engine call on a
// backend object (a matrix type in one memory space and the kernels of the MLP and
// GPT-2), so that a CUDA backend holding its stream and handles can replace the Eigen one
// without touching any layer. It is composed of small named concepts, one per group of
// kernels, and require_compute_backend names the first group a type lacks.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/core/deferred_value.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/optim/adamw_factors.hpp"
#include "weft/optim/gradient_summary.hpp"
#include "weft/optim/sgd_update.hpp"

namespace weft::exec {

// A name for messages, a scalar type, and the memory space its matrices live in.
template <class B>
concept backend_identity = requires {
    { B::name } -> std::convertible_to<std::string_view>;
    typename B::scalar;
    typename B::memory_space;
} && std::floating_point<typename B::scalar> && memory_space<typename B::memory_space> && std::movable<B>;

// Activations are B::matrix: rows = samples (or tokens), row-major. The engine builds
// matrices of a given shape to receive into and reads their storage as bytes to send, so
// construction, data() and size() are part of the interface, as are rows and columns.
// The matrix's value_type is what it stores, which need not be B::scalar (the type of the
// weights and gradients): exec::cpu stores its scalar, exec::cuda stores bf16 activations.
template <class B>
concept backend_matrices = backend_identity<B> &&
    std::default_initializable<typename B::matrix> && std::movable<typename B::matrix> &&
    std::constructible_from<typename B::matrix, int, int> &&
    std::is_trivially_copyable_v<typename B::matrix::value_type> &&
    requires(const B& b, typename B::matrix& m, const typename B::matrix& cm) {
        { m.data() } -> std::convertible_to<typename B::matrix::value_type*>;
        { cm.data() } -> std::convertible_to<const typename B::matrix::value_type*>;
        { cm.size() } -> std::integral;
        { b.rows(cm) } -> std::convertible_to<int>;
        { b.cols(cm) } -> std::convertible_to<int>;
    };

// Kernels take weights as spans into a stage's flat parameter buffer; weight-gradient
// kernels accumulate (+=) into spans of the flat gradient buffer. linear_forward's bias may
// be empty: no bias (a row-parallel layer adds its bias after summing over its tp group).
template <class B>
concept linear_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& x, std::span<const typename B::scalar> w,
             std::span<typename B::scalar> dw, int n) {
        { b.linear_forward(x, w, w, n, n) } -> std::same_as<typename B::matrix>;
        { b.linear_backward_input(x, w, n, n) } -> std::same_as<typename B::matrix>;
        b.linear_backward_weight(x, x, dw, dw);
        // x W^T for a W stored [out, in] (GPT-2's LM head, tied to the [vocab, width] embedding).
        { b.transposed_linear_forward(x, w, n, n) } -> std::same_as<typename B::matrix>;
        { b.transposed_linear_backward_input(x, w, n, n) } -> std::same_as<typename B::matrix>;
        b.transposed_linear_backward_weight(x, x, dw);
    };

template <class B>
concept elementwise_kernels = backend_matrices<B> && requires(B& b, const typename B::matrix& x) {
    { b.add(x, x) } -> std::same_as<typename B::matrix>;
    { b.gelu_forward(x) } -> std::same_as<typename B::matrix>;
    { b.gelu_backward(x, x) } -> std::same_as<typename B::matrix>;
};

template <class B>
concept normalization_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& x, typename B::matrix& out, std::span<const typename B::scalar> w,
             std::span<typename B::scalar> dw, typename B::scalar eps) {
        { b.layer_norm_forward(x, w, w, eps, out, out) } -> std::same_as<typename B::matrix>;
        { b.layer_norm_backward_input(x, x, x, w, x) } -> std::same_as<typename B::matrix>;
        b.layer_norm_backward_weight(x, x, x, x, dw, dw);
    };

template <class B>
concept loss_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& logits, typename B::matrix& dlogits,
             std::span<const std::int32_t> labels, typename B::scalar scale) {
        { b.cross_entropy(logits, labels, scale, dlogits) } -> std::same_as<typename B::scalar>;
    };

// GPT-2's token and position embedding.
template <class B>
concept embedding_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& dy, std::span<const std::int32_t> tokens,
             std::span<const typename B::scalar> w, std::span<typename B::scalar> dw, int n) {
        { b.embedding_forward(tokens, w, w, n, n, n) } -> std::same_as<typename B::matrix>;
        b.embedding_backward_weight(tokens, dy, dw, dw, n, n);
    };

// GPT-2's causal multi-head self-attention core (no weights).
template <class B>
concept attention_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& qkv, typename B::matrix& probs, int n) {
        { b.causal_attention_forward(qkv, n, n, probs) } -> std::same_as<typename B::matrix>;
        { b.causal_attention_backward(qkv, qkv, qkv, n, n) } -> std::same_as<typename B::matrix>;
    };

// What the engine needs of a backend besides kernels: where a training state's buffers live
// (core/state_memory.hpp: the CPU's host memory, a GPU's managed memory), a wait for the work
// it has queued (the CPU's kernels finish before they return; a GPU's run on a stream), and
// copies between a matrix and host memory of its size.
template <class B>
concept backend_context = backend_matrices<B> &&
    requires(B& b, const B& cb, const typename B::matrix& cm, typename B::matrix& m,
             std::span<typename B::scalar> host, std::span<const typename B::scalar> const_host) {
        { cb.state_memory() } -> std::same_as<const state_memory&>;
        cb.synchronize();
        b.copy_to_host(cm, host);
        b.copy_from_host(const_host, m);
    };

template <class B>
concept compute_backend = backend_identity<B> && backend_matrices<B> && backend_context<B> && linear_kernels<B> &&
                          elementwise_kernels<B> && normalization_kernels<B> && loss_kernels<B> &&
                          embedding_kernels<B> && attention_kernels<B>;

// Kernels a backend may add, each doing what two concept kernels do in a row, in one pass
// over memory (exec::cuda: a GEMM with cuBLASLt's bias+GELU epilogue, one residual+LayerNorm
// kernel). nn/ layers call them where a backend has them and the two kernels otherwise,
// so a backend without them still models compute_backend; exec::cpu has them as the plain
// composition, so the CPU runs the same layer code with unchanged numerics.
//  - linear_gelu_forward(x, w, b, in, out, pre_act): pre_act = linear_forward(x, w, b, in,
//    out), returns gelu_forward(pre_act).
//  - linear_backward_input_gelu(dy, w, in, out, pre_act): returns gelu_backward(pre_act,
//    linear_backward_input(dy, w, in, out)), the input gradient through the GELU before it.
//  - residual_layer_norm_forward(a, b, gamma, beta, eps, sum, mean, rstd): sum = add(a, b),
//    returns layer_norm_forward(sum, gamma, beta, eps, mean, rstd).
template <class B>
concept fused_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& x, typename B::matrix& out, std::span<const typename B::scalar> w,
             typename B::scalar eps, int n) {
        { b.linear_gelu_forward(x, w, w, n, n, out) } -> std::same_as<typename B::matrix>;
        { b.linear_backward_input_gelu(x, w, n, n, x) } -> std::same_as<typename B::matrix>;
        { b.residual_layer_norm_forward(x, x, w, w, eps, out, out, out) } -> std::same_as<typename B::matrix>;
    };

// A kernel a backend whose loss a device computes may add, so that the host reads the loss
// when it needs it rather than when the kernels are queued:
//  - cross_entropy_deferred(logits, labels, scale, dlogits): cross_entropy, its mean loss
//    handed out as a deferred_value (core/deferred_value.hpp) that waits for it when read.
// nn::cross_entropy uses it where a backend has it; the engine reads a step's losses once
// its actions are all queued. Without it the loss is read as cross_entropy returns.
template <class B>
concept deferred_loss_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& logits, typename B::matrix& dlogits,
             std::span<const std::int32_t> labels, typename B::scalar scale) {
        {
            b.cross_entropy_deferred(logits, labels, scale, dlogits)
        } -> std::same_as<deferred_value<typename B::scalar>>;
    };

// Kernels a backend may add for the vocabulary-parallel loss (nn/vocab_parallel_cross_entropy.hpp),
// over logits whose columns are the slice [first_column, first_column + cols) of the
// vocabulary, so that only per-row scalars leave the backend: exec/softmax_rows.hpp's passes.
//  - row_max(logits): each row's largest logit;
//  - softmax_partial_sums(logits, max, labels, first_column): 2 * rows sums (the row's sum of
//    exp(logit - max), then its label's shifted logit where the slice holds it, else 0);
//  - softmax_gradient(logits, max, sums, labels, first_column, row_scale): the slice of
//    row_scale (softmax - onehot), from the group's maxima and sums.
// Without them the loss runs those passes on a host copy of the logits.
template <class B>
concept vocab_parallel_loss_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& x, std::span<const typename B::scalar> s,
             std::span<const std::int32_t> labels, int first_column, typename B::scalar row_scale) {
        { b.row_max(x) } -> std::same_as<std::vector<typename B::scalar>>;
        { b.softmax_partial_sums(x, s, labels, first_column) } -> std::same_as<std::vector<typename B::scalar>>;
        { b.softmax_gradient(x, s, s, labels, first_column, row_scale) } -> std::same_as<typename B::matrix>;
    };

// Kernels a backend may add for the vocabulary-parallel embedding (nn/embedding.hpp under
// tensor parallelism), over the wte rows [first_row, first_row + wte_rows.size() / width) a
// rank holds, so that its rows and gradients stay in the backend's memory:
//  - vocab_parallel_embedding_forward(tokens, wte_rows, first_row, wpe, width, seq_len,
//    reduce): the rows of the tokens this rank holds and zeros for the others, as B::scalar
//    in the backend's memory, summed over the group in place by reduce(span), then wpe added
//    to each row by position and the result rounded once into a matrix: over the group,
//    embedding_forward's arithmetic (x + 0 == x).
//  - vocab_parallel_embedding_backward_weight(tokens, dy, dwte_rows, first_row, dwpe,
//    seq_len): embedding_backward_weight restricted to the held rows of dwte (dwpe whole); dy
//    is the same on every rank, so it needs no communication.
// Without them the layer builds its rows and sums its gradients on a host copy; exec::cpu
// has them as that host code.
template <class B>
concept vocab_parallel_embedding_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& dy, std::span<const std::int32_t> tokens,
             std::span<const typename B::scalar> w, std::span<typename B::scalar> dw, int n,
             void (*reduce)(std::span<typename B::scalar>)) {
        { b.vocab_parallel_embedding_forward(tokens, w, n, w, n, n, reduce) } -> std::same_as<typename B::matrix>;
        b.vocab_parallel_embedding_backward_weight(tokens, dy, dw, n, dw, n);
    };

// The whole vocabulary-parallel loss a backend may add, so that nothing of it comes to the
// host until the loss is read (exec::cuda over comm::nccl: no wait mid-step):
//  - vocab_parallel_cross_entropy(logits, labels, first_column, row_scale, group_size,
//    gather, sum, dlogits): row_max, then gather(mine, all) of the maxima over the group
//    (all: group_size blocks) and their largest per row, softmax_partial_sums, then sum(sums)
//    over the group, softmax_gradient into dlogits, and the mean loss as a deferred_value.
//    The spans the callbacks see are in the backend's memory. What the three passes and the
//    host's reductions compute (exec/softmax_rows.hpp), in that order.
template <class B>
concept vocab_parallel_loss_reduction_kernels = backend_matrices<B> &&
    requires(B& b, const typename B::matrix& x, typename B::matrix& d, std::span<const std::int32_t> labels,
             int n, typename B::scalar row_scale,
             void (*gather)(std::span<const typename B::scalar>, std::span<typename B::scalar>),
             void (*sum)(std::span<typename B::scalar>)) {
        {
            b.vocab_parallel_cross_entropy(x, labels, n, row_scale, n, gather, sum, d)
        } -> std::same_as<deferred_value<typename B::scalar>>;
    };

// A kernel a backend whose matrices are not host memory of its scalar may add for tensor
// parallelism's sums (nn/tensor_parallel.hpp), so that they stay in the backend's memory
// when the group's communicator moves that memory (comm::nccl):
//  - reduce_matrix(m, bias, reduce): widens m's elements to B::scalar in the backend's
//    memory, calls reduce(span) on them (the group's sum, in place), adds bias to every row
//    (an empty bias: none; else of m's width) and writes the result back into m, rounded
//    once. What a host copy of m does (copy_to_host, the sum, the bias, copy_from_host),
//    without the copies.
// Without it, or over a communicator of host memory, the sums run on a host copy.
template <class B>
concept matrix_reduction_kernels = backend_matrices<B> &&
    requires(B& b, typename B::matrix& m, std::span<const typename B::scalar> bias,
             void (*reduce)(std::span<typename B::scalar>)) { b.reduce_matrix(m, bias, reduce); };

// What a backend whose work runs on a device may add so that the host's waits for that work
// can give up (exec::cuda: weft/exec/cuda/wait_limit.hpp):
//  - set_wait_limit(limit, rank): synchronize() and every other wait of the host for the
//    backend's queued work throw comm::timeout_error naming `rank` once they have waited
//    `limit`.
// The engine sets it to its communicator's timeout, so that compute stopped behind a message
// that never comes ends the run like the communicator's own waits. exec::cpu has none: its
// kernels finish before they return, and its waits are the communicator's.
template <class B>
concept limited_waits = requires(B& b, std::chrono::steady_clock::duration limit, int rank) {
    b.set_wait_limit(limit, rank);
};

// Kernels a backend may add for the step after backward, over the training state's flat
// buffers where they live (exec::cuda: on the GPU, so that an optimizer step moves no pages
// of managed memory to the host). The engine calls them where a backend has them and the
// host's code otherwise; exec::cpu has them as that host code, so its numbers do not change.
//  - scale(values, factor): optim::scale_on_host (optim/gradient_scale.hpp), values *=
//    factor: the averaging of the data-parallel group's summed gradients.
//  - adamw_update(params, grads, m, v, factors, decays): optim::adamw_update_on_host
//    (optim/adamw_update.hpp), one range of a stage's buffers.
//  - sgd_update(params, grads, momentum_buffer, factors, decays): optim::sgd_update_on_host
//    (optim/sgd_update.hpp), likewise.
//  - summarize_gradients(owned, offset, counted): optim::summarize_gradients_on_host
//    (optim/gradient_summary.hpp): the sum of squares over the counted runs and whether
//    every owned element is finite.
template <class B>
concept optimizer_kernels = backend_identity<B> &&
    requires(B& b, std::span<typename B::scalar> x, std::span<const typename B::scalar> cx,
             const optim::adamw_factors<typename B::scalar>& f, const optim::sgd_factors<typename B::scalar>& sf,
             std::span<const optim::flat_run> runs, bool flag, std::size_t offset) {
        b.scale(x, f.grad_scale);
        b.adamw_update(x, cx, x, x, f, flag);
        b.sgd_update(x, cx, x, sf, flag);
        { b.summarize_gradients(cx, offset, runs) } -> std::same_as<optim::gradient_summary>;
    };

namespace detail {
// The first group of the interface B lacks, as a failed static_assert; true otherwise.
template <class B>
constexpr bool diagnose_compute_backend() {
    if constexpr (!backend_identity<B>)
        static_assert(backend_identity<B>,
                      "weft: this type does not model weft::compute_backend: it needs a static `name`, a "
                      "floating-point `scalar`, a `memory_space` (weft::host_space or weft::device_space) and "
                      "must be movable (weft::exec::backend_identity); see weft/exec/compute_backend.hpp");
    else if constexpr (!backend_matrices<B>)
        static_assert(backend_matrices<B>,
                      "weft: this type does not model weft::compute_backend: its `matrix` must be "
                      "default-constructible, movable, constructible from (rows, cols), with a trivially copyable "
                      "value_type, data() and size(), "
                      "and the backend needs rows(m) and cols(m) (weft::exec::backend_matrices); see "
                      "weft/exec/compute_backend.hpp");
    else if constexpr (!backend_context<B>)
        static_assert(backend_context<B>,
                      "weft: this type does not model weft::compute_backend: it lacks state_memory(), "
                      "synchronize(), copy_to_host or copy_from_host (weft::exec::backend_context); see "
                      "weft/exec/compute_backend.hpp");
    else if constexpr (!linear_kernels<B>)
        static_assert(linear_kernels<B>,
                      "weft: this type does not model weft::compute_backend: it lacks the linear kernels "
                      "(linear_forward/_backward_input/_backward_weight and their transposed_ forms; "
                      "weft::exec::linear_kernels); see weft/exec/compute_backend.hpp");
    else if constexpr (!elementwise_kernels<B>)
        static_assert(elementwise_kernels<B>,
                      "weft: this type does not model weft::compute_backend: it lacks add, gelu_forward or "
                      "gelu_backward (weft::exec::elementwise_kernels); see weft/exec/compute_backend.hpp");
    else if constexpr (!normalization_kernels<B>)
        static_assert(normalization_kernels<B>,
                      "weft: this type does not model weft::compute_backend: it lacks the layer_norm kernels "
                      "(weft::exec::normalization_kernels); see weft/exec/compute_backend.hpp");
    else if constexpr (!loss_kernels<B>)
        static_assert(loss_kernels<B>,
                      "weft: this type does not model weft::compute_backend: it lacks cross_entropy "
                      "(weft::exec::loss_kernels); see weft/exec/compute_backend.hpp");
    else if constexpr (!embedding_kernels<B>)
        static_assert(embedding_kernels<B>,
                      "weft: this type does not model weft::compute_backend: it lacks embedding_forward or "
                      "embedding_backward_weight (weft::exec::embedding_kernels); see "
                      "weft/exec/compute_backend.hpp");
    else if constexpr (!attention_kernels<B>)
        static_assert(attention_kernels<B>,
                      "weft: this type does not model weft::compute_backend: it lacks causal_attention_forward "
                      "or causal_attention_backward (weft::exec::attention_kernels); see "
                      "weft/exec/compute_backend.hpp");
    return true;  // the static_assert that failed, if any, is the message
}
}  // namespace detail

// Instantiate where a backend is taken (the engine does): a type that is not a backend
// stops the build with one message naming the first group of the interface it lacks.
template <class B>
struct require_compute_backend {
    static_assert(detail::diagnose_compute_backend<B>());
};

}  // namespace weft::exec

namespace weft {
using exec::compute_backend;
}  // namespace weft
