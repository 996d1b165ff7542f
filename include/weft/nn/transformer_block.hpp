// One GPT-2 transformer block, pre-LayerNorm: x + attn(ln_1(x)), then
// + mlp(ln_2(.)) with a 4x GELU (tanh) MLP. Split backward: backward_input computes the
// input gradient and keeps only what the weight gradients need; backward_weight adds those.
// Tensor parallelism (Megatron): attention split by heads, the MLP's c_fc column-parallel
// and c_proj row-parallel; the block's input and output stay replicated on every tp rank.
#pragma once

#include <span>
#include <string>
#include <utility>

#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/attention.hpp"
#include "weft/nn/layer_norm.hpp"
#include "weft/nn/linear.hpp"
#include "weft/nn/tensor_parallel.hpp"

namespace weft::nn {

template <compute_backend Backend>
class transformer_block {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    struct saved {
        matrix x, mean_1, rstd_1, ln_1;  // block input and its ln_1
        typename attention<Backend>::saved attn;
        matrix x_mid, mean_2, rstd_2, ln_2;  // after the attention residual, and its ln_2
        matrix pre_act;                      // c_fc output, until backward_input
        matrix act;                          // its GELU = mlp c_proj input
        matrix d_out;                        // gradient of the block output = mlp c_proj's dY
        matrix d_pre_act;                    // c_fc's dY
        matrix d_ln_2, d_ln_1;               // the LayerNorms' dY

        template <class F>
        void for_each_matrix(F&& f) const {
            for (const matrix* m : {&x, &mean_1, &rstd_1, &ln_1, &attn.qkv, &attn.probs, &attn.att, &attn.d_out,
                                    &attn.d_qkv, &x_mid, &mean_2, &rstd_2, &ln_2, &pre_act, &act, &d_out,
                                    &d_pre_act, &d_ln_2, &d_ln_1})
                f(*m);
        }
    };

    transformer_block() = default;
    // Registers h.<index>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}
    // (this rank's parts of them under a tp group of size > 1; LayerNorms whole).
    //
    // Why the replicated tensors need no gradient reduction: c_proj (both) all-reduces its
    // output in forward and c_attn / c_fc all-reduce their input gradient in backward_input,
    // so every LayerNorm's input, statistics and dY, and every row-parallel bias's dY, are
    // the same on all tp ranks; their gradients, computed by the same kernels from the same
    // values, are then identical bit for bit.
    transformer_block(parameter_registry& registry, int index, int width, int heads, int seq_len,
                      const tp_group<scalar>& tp = {}) {
        const std::string prefix = "h." + std::to_string(index);
        ln_1_ = layer_norm<Backend>(registry, prefix + ".ln_1", width);
        attn_ = attention<Backend>(registry, prefix + ".attn", width, heads, seq_len, tp);
        ln_2_ = layer_norm<Backend>(registry, prefix + ".ln_2", width);
        c_fc_ = linear<Backend>(registry, prefix + ".mlp.c_fc", width, 4 * width, linear_parallel::column, tp);
        c_proj_ = linear<Backend>(registry, prefix + ".mlp.c_proj", 4 * width, width, linear_parallel::row, tp);
    }

    // A block's output, x_mid + the MLP's output, as its two terms not yet added, so that the
    // LayerNorm after it (the next block's ln_1, the head's ln_f) adds them in its own kernel
    // where the backend fuses the two (exec::fused_kernels). `residual` is the block's saved
    // x_mid: the terms are read before the block's saved state changes.
    struct output_terms {
        const matrix* residual = nullptr;
        matrix branch;
        [[nodiscard]] matrix sum(Backend& backend) const { return backend.add(*residual, branch); }
    };

    // Takes x by value and keeps it: pass an rvalue to avoid a copy.
    [[nodiscard]] matrix forward(Backend& backend, std::span<const scalar> params, matrix x, saved& s) const {
        return forward_terms(backend, params, std::move(x), s).sum(backend);
    }
    [[nodiscard]] output_terms forward_terms(Backend& backend, std::span<const scalar> params, matrix x,
                                             saved& s) const {
        s.x = std::move(x);
        s.ln_1 = ln_1_.forward(backend, params, s.x, s.mean_1, s.rstd_1);
        return forward_after_ln_1(backend, params, s);
    }
    // The block's input given as the previous block's output terms: their sum is kept as the
    // block's input and normalized by ln_1 in one kernel where the backend fuses the two.
    [[nodiscard]] output_terms forward_terms(Backend& backend, std::span<const scalar> params,
                                             const output_terms& input, saved& s) const {
        s.ln_1 = ln_1_.forward_residual(backend, params, *input.residual, input.branch, s.x, s.mean_1, s.rstd_1);
        return forward_after_ln_1(backend, params, s);
    }

    // Selective recompute: what backward_input computes again (the attention probabilities).
    static void drop_recomputable(saved& s) { attention<Backend>::drop_recomputable(s.attn); }

    [[nodiscard]] matrix backward_input(Backend& backend, std::span<const scalar> params, matrix dy, saved& s) const {
        s.d_out = std::move(dy);
        s.d_pre_act = c_proj_.backward_input_gelu(backend, params, s.d_out, s.pre_act);
        s.pre_act = matrix();
        s.d_ln_2 = c_fc_.backward_input(backend, params, s.d_pre_act);
        matrix d_mid = backend.add(s.d_out, ln_2_.backward_input(backend, params, s.x_mid, s.mean_2, s.rstd_2, s.d_ln_2));
        // attention keeps d_mid (its output gradient); the residual path reads it back from there.
        s.d_ln_1 = attn_.backward_input(backend, params, std::move(d_mid), s.attn);
        return backend.add(s.attn.d_out, ln_1_.backward_input(backend, params, s.x, s.mean_1, s.rstd_1, s.d_ln_1));
    }

    void backward_weight(Backend& backend, std::span<scalar> grads, const saved& s) const {
        c_proj_.backward_weight(backend, grads, s.act, s.d_out);
        c_fc_.backward_weight(backend, grads, s.ln_2, s.d_pre_act);
        ln_2_.backward_weight(backend, grads, s.x_mid, s.mean_2, s.rstd_2, s.d_ln_2);
        attn_.backward_weight(backend, grads, s.ln_1, s.attn);
        ln_1_.backward_weight(backend, grads, s.x, s.mean_1, s.rstd_1, s.d_ln_1);
    }

private:
    output_terms forward_after_ln_1(Backend& backend, std::span<const scalar> params, saved& s) const {
        const matrix attn_out = attn_.forward(backend, params, s.ln_1, s.attn);
        s.ln_2 = ln_2_.forward_residual(backend, params, s.x, attn_out, s.x_mid, s.mean_2, s.rstd_2);
        s.act = c_fc_.forward_gelu(backend, params, s.ln_2, s.pre_act);
        return {&s.x_mid, c_proj_.forward(backend, params, s.act)};
    }

    layer_norm<Backend> ln_1_;
    attention<Backend> attn_;
    layer_norm<Backend> ln_2_;
    linear<Backend> c_fc_;
    linear<Backend> c_proj_;
};

}  // namespace weft::nn
