// A whole GPT-2 model on one GPU: the same model as nn::gpt_stage over every unit (token
// and position embeddings, pre-LayerNorm blocks, ln_f, LM head tied to wte, mean
// cross-entropy), trained with AdamW on fp32 master weights while the GEMMs, attention
// and activations run in bf16. The parameters arrive in the CPU model's flat layout
// (its parameter_registry and flat fp32 buffer), and gradients and weights come back in
// that layout, so the CPU model is the numerical reference and checkpoints stay one walk
// over the registry.
//
// The LM head runs over the vocabulary padded to a multiple of 128 (as llm.c): a bf16
// copy of wte with zero rows appended, so that every GEMM's leading dimension is aligned
// (50257 is odd); cross-entropy ignores the padding columns and gives them zero gradient.
//
// Every device buffer is allocated at construction for `batch` sequences of seq_len
// tokens. enqueue_step() then only enqueues work on the given stream (no allocation, no
// host synchronization), so a whole training step can be captured with graph::capture
// and replayed. Reductions run in a fixed order (no atomics): replays and eager steps
// from the same state give bit-identical results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/device_buffer.hpp"
#include "weft/exec/cuda/gemm.hpp"
#include "weft/exec/cuda/kernels/adamw.cuh"
#include "weft/exec/cuda/kernels/attention.cuh"
#include "weft/exec/cuda/kernels/bias_grad.cuh"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/cross_entropy.cuh"
#include "weft/exec/cuda/kernels/embedding.cuh"
#include "weft/exec/cuda/kernels/gelu.cuh"
#include "weft/exec/cuda/kernels/layer_norm.cuh"
#include "weft/exec/cuda/kernels/residual_add.cuh"
#include "weft/exec/cuda/runtime.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/parameter_registry.hpp"
#include "weft/optim/decay_mask.hpp"

namespace weft::train::cuda {

// The kernels, buffers and GEMMs this model is made of.
using namespace weft::cuda;  // NOLINT(google-build-using-namespace): one namespace, used throughout

class gpt_trainer {
public:
    // nn::layer_norm's eps (PyTorch's default); the CPU model's value, restated because
    // nn::layer_norm is a template over a backend this header cannot instantiate.
    static constexpr float layer_norm_eps = 1e-5f;
    static constexpr int vocab_alignment = 128;

    // `registry` and `parameters` are the CPU model's (nn::gpt_stage over units
    // [0, num_units)): every tensor is found by its Hugging Face name and its shape
    // checked, so a mismatch is a clear error rather than a silent misread.
    gpt_trainer(const nn::gpt_config& config, const nn::parameter_registry& registry, std::span<const float> parameters,
              int batch)
        : layout_(make_layout(config, registry, parameters.size(), batch)),
          config_(config),
          registry_(registry),
          batch_(batch),
          rows_(batch * config.seq_len),
          head_dim_(config.d_model / config.num_heads),
          padded_vocab_((config.vocab_size + vocab_alignment - 1) / vocab_alignment * vocab_alignment),
          size_(registry.total_size()) {
        allocate();
        reset(parameters);
    }

    gpt_trainer(const gpt_trainer&) = delete;
    gpt_trainer& operator=(const gpt_trainer&) = delete;
    gpt_trainer(gpt_trainer&&) = default;
    gpt_trainer& operator=(gpt_trainer&&) = default;
    ~gpt_trainer() = default;

    [[nodiscard]] const nn::gpt_config& config() const { return config_; }
    [[nodiscard]] const nn::parameter_registry& registry() const { return registry_; }
    [[nodiscard]] int batch() const { return batch_; }
    // Tokens per step: batch * seq_len.
    [[nodiscard]] int tokens() const { return rows_; }

    // Synchronous: replaces the parameters (CPU flat layout) and restarts the optimizer
    // (zero moments, step 0). Gradients and the loss are zeroed too.
    void reset(std::span<const float> parameters) {
        require(parameters.size() == size_, "gpt_trainer::reset: parameters.size()", parameters.size(),
                "must equal the registry's total size " + std::to_string(size_));
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // nothing may still read the old weights
        master_.copy_from_host(parameters);
        convert(master_.data(), weights_.data(), size_, nullptr);
        refresh_head_weights(nullptr);
        grads_.fill_zero();
        m_.fill_zero();
        v_.fill_zero();
        loss_.fill_zero();
        const adamw_hyperparameters defaults;
        adamw_state_init(state_.data(), defaults.lr, defaults.beta1, defaults.beta2, defaults.eps,
                         defaults.weight_decay);
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }

    // Forward and the mean cross-entropy only (no gradients): the loss lands in loss().
    // inputs and targets are device pointers to batch * seq_len token ids, row-major.
    void enqueue_forward(const std::int32_t* inputs, const std::int32_t* targets, cudaStream_t stream) {
        require_tokens(inputs, targets, "enqueue_forward");
        forward(inputs, targets, false, stream);
    }

    // Zeroes the gradients, then forward, loss and the full backward: gradients() holds
    // d(mean loss)/d(parameters), the tied wte with both its head and embedding parts.
    void enqueue_forward_backward(const std::int32_t* inputs, const std::int32_t* targets, cudaStream_t stream) {
        require_tokens(inputs, targets, "enqueue_forward_backward");
        grads_.fill_zero(stream);
        forward(inputs, targets, true, stream);
        backward(inputs, stream);
    }

    // One training step: enqueue_forward_backward, then AdamW (torch.optim.AdamW's update,
    // weight decay on 2-D tensors only, as optim::adamw) on the fp32 master weights,
    // refreshing their bf16 copy. A captured step replays with the options given here.
    void enqueue_step(const std::int32_t* inputs, const std::int32_t* targets, const adamw_hyperparameters& options,
                      cudaStream_t stream) {
        weft::cuda::detail::require_adamw_hyperparameters(options.lr, options.beta1, options.beta2, options.eps,
                                              options.weight_decay);  // before anything is enqueued
        enqueue_forward_backward(inputs, targets, stream);
        adamw_set_hyperparameters(state_.data(), options, stream);
        adamw_begin_step(state_.data(), stream);
        adamw_update(master_.data(), grads_.data(), m_.data(), v_.data(), weights_.data(), layout_.ranges,
                     state_.data(), stream);
        refresh_head_weights(stream);
    }

    // Copy-outs. Synchronous: each waits for all work on the device first.
    [[nodiscard]] std::vector<float> parameters() const { return download(master_); }
    [[nodiscard]] std::vector<float> gradients() const { return download(grads_); }
    [[nodiscard]] float loss() const { return download(loss_)[0]; }
    // AdamW's state in the CPU flat layout: what a checkpoint's optimizer companion holds
    // (io::save_optimizer_state), and what optim::adamw::restore takes.
    struct optimizer_state {
        std::uint64_t step = 0;
        std::vector<float> exp_avg, exp_avg_sq;
    };
    // Synchronous.
    [[nodiscard]] optimizer_state optimizer() const {
        optimizer_state state;
        state.step = step_count();
        state.exp_avg = download(m_);
        state.exp_avg_sq = download(v_);
        return state;
    }
    // Synchronous: puts back a saved AdamW state (moments and steps taken), so training
    // resumes with the same bias correction and moments as if it had not stopped.
    void restore_optimizer(std::uint64_t step, std::span<const float> exp_avg, std::span<const float> exp_avg_sq) {
        require(exp_avg.size() == size_, "gpt_trainer::restore_optimizer: exp_avg.size()", exp_avg.size(),
                "must equal the registry's total size " + std::to_string(size_));
        require(exp_avg_sq.size() == size_, "gpt_trainer::restore_optimizer: exp_avg_sq.size()", exp_avg_sq.size(),
                "must equal the registry's total size " + std::to_string(size_));
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // nothing may still use the old moments
        m_.copy_from_host(exp_avg);
        v_.copy_from_host(exp_avg_sq);
        const adamw_hyperparameters defaults;  // enqueue_step sets the run's own before each update
        adamw_state_init(state_.data(), defaults.lr, defaults.beta1, defaults.beta2, defaults.eps,
                         defaults.weight_decay, step);
    }

    // AdamW steps taken since construction or reset().
    [[nodiscard]] std::uint64_t step_count() const {
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        return state_.to_host()[0].step;
    }

private:
    // Offsets into the flat buffers (same for weights, gradients and moments).
    struct block_tensors {
        std::size_t ln_1_w, ln_1_b, c_attn_w, c_attn_b, attn_proj_w, attn_proj_b;
        std::size_t ln_2_w, ln_2_b, c_fc_w, c_fc_b, mlp_proj_w, mlp_proj_b;
    };
    // A block's saved activations (bf16) and statistics (fp32), kept for backward.
    struct block_activations {
        device_buffer<bf16> ln_1, qkv, att, mid, ln_2, fc, act, out;
        device_buffer<float> mean_1, rstd_1, lse, mean_2, rstd_2;
    };

    // Where every tensor sits in the flat buffers, and which ranges decay. Built (and
    // every argument checked) before any CUDA call, so bad input is a clear
    // invalid_argument error even on a machine without a GPU.
    struct layout {
        std::size_t wte = 0, wpe = 0, ln_f_w = 0, ln_f_b = 0;
        std::vector<block_tensors> blocks;
        std::vector<adamw_range> ranges;
    };

    static layout make_layout(const nn::gpt_config& config, const nn::parameter_registry& registry,
                              std::size_t parameters, int batch) {
        config.validate();
        require(batch >= 1 && batch <= 65535, "gpt_trainer: batch", batch, "must be in [1, 65535]");
        require(std::int64_t(batch) * config.seq_len <= INT_MAX, "gpt_trainer: batch * seq_len",
                std::int64_t(batch) * config.seq_len, "must fit in an int (the GEMMs take int sizes)");
        require(config.vocab_size <= INT_MAX - vocab_alignment, "gpt_trainer: vocab_size", config.vocab_size,
                "must leave room to pad to a multiple of " + std::to_string(vocab_alignment) + " in an int");
        const int head_dim = config.d_model / config.num_heads;
        require(head_dim % 32 == 0 && head_dim <= 128, "gpt_trainer: d_model / num_heads", head_dim,
                "must be a multiple of 32 in [32, 128] (the CUDA attention kernel's head sizes)");
        require(config.seq_len <= 8192, "gpt_trainer: seq_len", config.seq_len,
                "must be at most 8192 (the CUDA attention kernel keeps a row of scores in shared memory)");
        require(parameters == registry.total_size(), "gpt_trainer: parameters.size()", parameters,
                "must equal the registry's total size " + std::to_string(registry.total_size()));

        const auto tensor = [&registry](const std::string& name, const std::vector<int>& shape) {
            require(registry.contains(name), "gpt_trainer: registry", "without " + name,
                    "must hold every tensor of the whole model (nn::gpt_stage over units [0, num_units))");
            const nn::parameter_info& info = registry.find(name);
            std::string want, got;
            for (int d : shape) want += (want.empty() ? "[" : ", ") + std::to_string(d);
            for (int d : info.shape) got += (got.empty() ? "[" : ", ") + std::to_string(d);
            require(info.shape == shape, "gpt_trainer: shape of " + name, got + "]",
                    "must be " + want + "] for this gpt_config");
            return info.offset;
        };
        const int C = config.d_model, V = config.vocab_size, T = config.seq_len;
        layout result;
        result.wte = tensor("wte.weight", {V, C});
        result.wpe = tensor("wpe.weight", {T, C});
        for (int l = 0; l < config.num_layers; ++l) {
            const std::string h = "h." + std::to_string(l) + ".";
            result.blocks.push_back({tensor(h + "ln_1.weight", {C}), tensor(h + "ln_1.bias", {C}),
                                     tensor(h + "attn.c_attn.weight", {C, 3 * C}),
                                     tensor(h + "attn.c_attn.bias", {3 * C}), tensor(h + "attn.c_proj.weight", {C, C}),
                                     tensor(h + "attn.c_proj.bias", {C}), tensor(h + "ln_2.weight", {C}),
                                     tensor(h + "ln_2.bias", {C}), tensor(h + "mlp.c_fc.weight", {C, 4 * C}),
                                     tensor(h + "mlp.c_fc.bias", {4 * C}), tensor(h + "mlp.c_proj.weight", {4 * C, C}),
                                     tensor(h + "mlp.c_proj.bias", {C})});
        }
        result.ln_f_w = tensor("ln_f.weight", {C});
        result.ln_f_b = tensor("ln_f.bias", {C});

        // optim::adamw's rule (for_each_decay_range: 2-D+ tensors decay), with adjacent
        // tensors of the same flag merged so that the update takes few launches.
        optim::for_each_decay_range(
            registry, 0, registry.total_size(), [&result](std::size_t first, std::size_t last, bool decays) {
                auto& r = result.ranges;
                if (!r.empty() && r.back().decays == decays && r.back().offset + r.back().size == first)
                    r.back().size += last - first;
                else
                    r.push_back({first, last - first, decays});
            });
        return result;
    }

    void allocate() {
        const std::size_t N = std::size_t(rows_), C = std::size_t(config_.d_model), Vp = std::size_t(padded_vocab_);
        const std::size_t stats = std::size_t(batch_) * std::size_t(config_.num_heads) * std::size_t(config_.seq_len);
        master_ = device_buffer<float>(size_);
        weights_ = device_buffer<bf16>(size_);
        grads_ = device_buffer<float>(size_);
        m_ = device_buffer<float>(size_);
        v_ = device_buffer<float>(size_);
        state_ = device_buffer<adamw_state>(1);
        embedded_ = device_buffer<bf16>(N * C);
        for (int l = 0; l < config_.num_layers; ++l) {
            block_activations a;
            a.ln_1 = device_buffer<bf16>(N * C);
            a.qkv = device_buffer<bf16>(N * 3 * C);
            a.att = device_buffer<bf16>(N * C);
            a.mid = device_buffer<bf16>(N * C);
            a.ln_2 = device_buffer<bf16>(N * C);
            a.fc = device_buffer<bf16>(N * 4 * C);
            a.act = device_buffer<bf16>(N * 4 * C);
            a.out = device_buffer<bf16>(N * C);
            a.mean_1 = device_buffer<float>(N);
            a.rstd_1 = device_buffer<float>(N);
            a.lse = device_buffer<float>(stats);
            a.mean_2 = device_buffer<float>(N);
            a.rstd_2 = device_buffer<float>(N);
            acts_.push_back(std::move(a));
        }
        proj_ = device_buffer<bf16>(N * C);
        ln_f_ = device_buffer<bf16>(N * C);
        mean_f_ = device_buffer<float>(N);
        rstd_f_ = device_buffer<float>(N);
        wte_head_ = device_buffer<bf16>(Vp * C);
        wte_head_.fill_zero();  // the padding rows stay zero; refresh_head_weights copies the rest
        dwte_head_ = device_buffer<float>(Vp * C);
        logits_ = device_buffer<bf16>(N * Vp);
        dlogits_ = device_buffer<bf16>(N * Vp);
        losses_ = device_buffer<float>(N);
        loss_ = device_buffer<float>(1);
        d_res_ = device_buffer<bf16>(N * C);
        d_mid_ = device_buffer<bf16>(N * C);
        d_tmp_ = device_buffer<bf16>(N * C);
        d_ln_ = device_buffer<bf16>(N * C);
        d_att_ = device_buffer<bf16>(N * C);
        d_qkv_ = device_buffer<bf16>(N * 3 * C);
        d_act_ = device_buffer<bf16>(N * 4 * C);
        d_fc_ = device_buffer<bf16>(N * 4 * C);
        delta_ = device_buffer<float>(stats);
    }

    static void require_tokens(const std::int32_t* inputs, const std::int32_t* targets, const char* what) {
        require(inputs != nullptr && targets != nullptr, std::string("gpt_trainer::") + what + ": inputs, targets",
                "a null pointer", "must be device pointers to batch * seq_len token ids");
    }

    // Rows [0, vocab) of the padded head weights = the bf16 wte (stream-ordered, capturable).
    void refresh_head_weights(cudaStream_t stream) {
        const std::size_t n = std::size_t(config_.vocab_size) * std::size_t(config_.d_model);
        check(cudaMemcpyAsync(wte_head_.data(), weights_.data() + layout_.wte, n * sizeof(bf16),
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync wte to the head's padded copy");
    }

    // The residual stream entering block l (the output of block l - 1, or the embedding).
    const bf16* block_input(int l) const { return l == 0 ? embedded_.data() : acts_[std::size_t(l) - 1].out.data(); }

    void forward(const std::int32_t* inputs, const std::int32_t* targets, bool with_gradient, cudaStream_t s) {
        const int N = rows_, C = config_.d_model, V = config_.vocab_size, T = config_.seq_len;
        const int NH = config_.num_heads, B = batch_;
        const std::size_t NC = std::size_t(N) * std::size_t(C);
        const float* P = master_.data();
        const bf16* W = weights_.data();

        // LayerNorm and embedding kernels read the fp32 masters (P), so their weights are
        // exact; GEMMs take bf16 operands and their bias epilogue the output type (W).
        embedding_forward(inputs, P + layout_.wte, P + layout_.wpe, embedded_.data(), B, T, C, V, s);
        for (int l = 0; l < config_.num_layers; ++l) {
            const block_tensors& p = layout_.blocks[std::size_t(l)];
            block_activations& a = acts_[std::size_t(l)];
            const bf16* x = block_input(l);
            layer_norm_forward(x, P + p.ln_1_w, P + p.ln_1_b, a.ln_1.data(), a.mean_1.data(), a.rstd_1.data(), N, C,
                               layer_norm_eps, s);
            gemm_.linear_forward(a.ln_1.data(), W + p.c_attn_w, W + p.c_attn_b, a.qkv.data(), N, C, 3 * C, s);
            attention_forward(a.qkv.data(), a.att.data(), a.lse.data(), B, T, NH, head_dim_, s);
            gemm_.linear_forward(a.att.data(), W + p.attn_proj_w, W + p.attn_proj_b, proj_.data(), N, C, C, s);
            residual_add(x, proj_.data(), a.mid.data(), NC, s);
            layer_norm_forward(a.mid.data(), P + p.ln_2_w, P + p.ln_2_b, a.ln_2.data(), a.mean_2.data(),
                               a.rstd_2.data(), N, C, layer_norm_eps, s);
            gemm_.linear_forward(a.ln_2.data(), W + p.c_fc_w, W + p.c_fc_b, a.fc.data(), N, C, 4 * C, s);
            gelu_forward(a.fc.data(), a.act.data(), 4 * NC, s);
            gemm_.linear_forward(a.act.data(), W + p.mlp_proj_w, W + p.mlp_proj_b, proj_.data(), N, 4 * C, C, s);
            residual_add(a.mid.data(), proj_.data(), a.out.data(), NC, s);
        }
        const bf16* x = block_input(config_.num_layers);
        layer_norm_forward(x, P + layout_.ln_f_w, P + layout_.ln_f_b, ln_f_.data(), mean_f_.data(), rstd_f_.data(), N,
                           C, layer_norm_eps, s);
        // logits [N, Vp] = ln_f [N, C] wte_head^T (wte_head stored [Vp, C]: the tied head,
        // padded; the padding columns come out exactly 0 and cross-entropy skips them).
        const int Vp = padded_vocab_;
        gemm_.matmul(ln_f_.data(), transpose::no, wte_head_.data(), transpose::yes, logits_.data(), N, Vp, C, 1.0f,
                     0.0f, static_cast<const bf16*>(nullptr), s);
        cross_entropy_forward_backward(logits_.data(), targets, losses_.data(),
                                       with_gradient ? dlogits_.data() : nullptr, N, V, Vp, 1.0f, s);
        mean(losses_.data(), N, loss_.data(), s);
    }

    // Backward of the forward just enqueued; gradients accumulate (+=) into grads_.
    void backward(const std::int32_t* inputs, cudaStream_t s) {
        const int N = rows_, C = config_.d_model, V = config_.vocab_size, T = config_.seq_len;
        const int NH = config_.num_heads, B = batch_;
        const std::size_t NC = std::size_t(N) * std::size_t(C);
        const float* P = master_.data();
        const bf16* W = weights_.data();
        float* G = grads_.data();

        // Head: dwte += dlogits^T ln_f (the head's half of the tied gradient; the padding
        // rows of the product are zero and dropped), d ln_f = dlogits wte_head. dlogits'
        // padding columns are zero, so the padded products equal the unpadded ones.
        const int Vp = padded_vocab_;
        const bf16* top = block_input(config_.num_layers);
        gemm_.matmul(dlogits_.data(), transpose::yes, ln_f_.data(), transpose::no, dwte_head_.data(), Vp, C, N, 1.0f,
                     0.0f, static_cast<const float*>(nullptr), s);
        residual_add(G + layout_.wte, dwte_head_.data(), G + layout_.wte, std::size_t(V) * std::size_t(C), s);
        gemm_.matmul(dlogits_.data(), transpose::no, wte_head_.data(), transpose::no, d_ln_.data(), N, C, Vp, 1.0f,
                     0.0f, static_cast<const bf16*>(nullptr), s);
        layer_norm_backward_weight(top, mean_f_.data(), rstd_f_.data(), d_ln_.data(), G + layout_.ln_f_w,
                                   G + layout_.ln_f_b, N, C, s);
        layer_norm_backward_input(top, mean_f_.data(), rstd_f_.data(), P + layout_.ln_f_w, d_ln_.data(), d_res_.data(),
                                  N, C, s);

        // d_res_ holds the gradient of block l's output on entry and of its input on exit.
        for (int l = config_.num_layers - 1; l >= 0; --l) {
            const block_tensors& p = layout_.blocks[std::size_t(l)];
            block_activations& a = acts_[std::size_t(l)];
            const bf16* x = block_input(l);
            // out = mid + act W_proj + b_proj
            gemm_.linear_backward_weight(a.act.data(), d_res_.data(), G + p.mlp_proj_w, N, 4 * C, C, s);
            bias_grad(d_res_.data(), G + p.mlp_proj_b, N, C, s);
            gemm_.linear_backward_input(d_res_.data(), W + p.mlp_proj_w, d_act_.data(), N, 4 * C, C, s);
            // act = gelu(fc), fc = ln_2 W_fc + b_fc
            gelu_backward(a.fc.data(), d_act_.data(), d_fc_.data(), 4 * NC, s);
            gemm_.linear_backward_weight(a.ln_2.data(), d_fc_.data(), G + p.c_fc_w, N, C, 4 * C, s);
            bias_grad(d_fc_.data(), G + p.c_fc_b, N, 4 * C, s);
            gemm_.linear_backward_input(d_fc_.data(), W + p.c_fc_w, d_ln_.data(), N, C, 4 * C, s);
            // ln_2 = LayerNorm(mid); mid also reaches out directly (the residual path)
            layer_norm_backward_weight(a.mid.data(), a.mean_2.data(), a.rstd_2.data(), d_ln_.data(), G + p.ln_2_w,
                                       G + p.ln_2_b, N, C, s);
            layer_norm_backward_input(a.mid.data(), a.mean_2.data(), a.rstd_2.data(), P + p.ln_2_w, d_ln_.data(),
                                      d_tmp_.data(), N, C, s);
            residual_add(d_res_.data(), d_tmp_.data(), d_mid_.data(), NC, s);
            // mid = x + att W_proj + b_proj
            gemm_.linear_backward_weight(a.att.data(), d_mid_.data(), G + p.attn_proj_w, N, C, C, s);
            bias_grad(d_mid_.data(), G + p.attn_proj_b, N, C, s);
            gemm_.linear_backward_input(d_mid_.data(), W + p.attn_proj_w, d_att_.data(), N, C, C, s);
            // att = attention(qkv), qkv = ln_1 W_attn + b_attn
            attention_backward(a.qkv.data(), a.att.data(), d_att_.data(), a.lse.data(), delta_.data(), d_qkv_.data(), B,
                               T, NH, head_dim_, s);
            gemm_.linear_backward_weight(a.ln_1.data(), d_qkv_.data(), G + p.c_attn_w, N, C, 3 * C, s);
            bias_grad(d_qkv_.data(), G + p.c_attn_b, N, 3 * C, s);
            gemm_.linear_backward_input(d_qkv_.data(), W + p.c_attn_w, d_ln_.data(), N, C, 3 * C, s);
            // ln_1 = LayerNorm(x); x also reaches mid directly
            layer_norm_backward_weight(x, a.mean_1.data(), a.rstd_1.data(), d_ln_.data(), G + p.ln_1_w, G + p.ln_1_b, N,
                                       C, s);
            layer_norm_backward_input(x, a.mean_1.data(), a.rstd_1.data(), P + p.ln_1_w, d_ln_.data(), d_tmp_.data(), N,
                                      C, s);
            residual_add(d_mid_.data(), d_tmp_.data(), d_res_.data(), NC, s);
        }
        // The embedding's half of the tied wte gradient, and wpe's.
        embedding_backward(inputs, d_res_.data(), G + layout_.wte, G + layout_.wpe, B, T, C, V, s);
    }

    template <class T>
    static std::vector<T> download(const device_buffer<T>& buffer) {
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        return buffer.to_host();
    }

    layout layout_;  // first: built, and the arguments checked, before any CUDA call
    nn::gpt_config config_;
    nn::parameter_registry registry_;
    int batch_ = 0;
    int rows_ = 0;  // batch * seq_len: the rows of every activation matrix
    int head_dim_ = 0;
    int padded_vocab_ = 0;  // vocab_size rounded up to vocab_alignment
    std::size_t size_ = 0;  // elements of the flat parameter buffers

    gemm gemm_;
    device_buffer<float> master_, grads_, m_, v_;
    device_buffer<bf16> weights_;
    device_buffer<adamw_state> state_;

    device_buffer<bf16> embedded_;
    std::vector<block_activations> acts_;
    device_buffer<bf16> proj_, ln_f_, wte_head_, logits_, dlogits_;
    device_buffer<float> dwte_head_;
    device_buffer<float> mean_f_, rstd_f_, losses_, loss_;
    device_buffer<bf16> d_res_, d_mid_, d_tmp_, d_ln_, d_att_, d_qkv_, d_act_, d_fc_;
    device_buffer<float> delta_;
};

}  // namespace weft::train::cuda
