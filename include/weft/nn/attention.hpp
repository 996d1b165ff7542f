// Causal multi-head self-attention as GPT-2 has it: one c_attn projection to
// [q | k | v], softmax(q k^T / sqrt(d)) v per (sequence, head) under a causal mask,
// and the c_proj output projection. Backward is split: the core has no weights, so
// backward_input does all of it and keeps only what the two projections' W need.
// Tensor parallelism splits it by heads: c_attn column-parallel (this rank's heads of q, k
// and v), the core on those heads alone, c_proj row-parallel (Megatron's attention).
#pragma once

#include <span>
#include <string>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/linear.hpp"
#include "weft/nn/tensor_parallel.hpp"

namespace weft::nn {

template <compute_backend Backend>
class attention {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    struct saved {
        matrix qkv;     // c_attn output, until backward_input
        matrix probs;   // softmax probabilities, until backward_input
        matrix att;     // heads concatenated = c_proj input
        matrix d_out;   // gradient of the layer output = c_proj's dY
        matrix d_qkv;   // c_attn's dY
    };

    attention() = default;
    // Registers `<prefix>.c_attn.{weight [width, 3 width], bias}` and
    // `<prefix>.c_proj.{weight [width, width], bias}` (Hugging Face's Conv1D layout).
    // With a tp group of size n (heads % n == 0) this rank holds the heads
    // [rank * heads / n, (rank + 1) * heads / n): those columns of each of q, k, v in c_attn
    // and those rows of c_proj.
    // c_proj's output is all-reduced in forward and its bias added once after; c_attn's
    // input gradient (d of ln_1's output) is all-reduced in backward_input.
    attention(parameter_registry& registry, const std::string& prefix, int width, int heads, int seq_len,
              const tp_group<scalar>& tp = {})
        : c_attn_(registry, prefix + ".c_attn", width, 3 * width, linear_parallel::column, checked(tp, heads), 3),
          c_proj_(registry, prefix + ".c_proj", width, width, linear_parallel::row, tp),
          heads_(heads / tp.size),
          seq_len_(seq_len) {}

    // x: [sequences * seq_len, width], token-major.
    [[nodiscard]] matrix forward(Backend& backend, std::span<const scalar> params, const matrix& x, saved& s) const {
        s.qkv = c_attn_.forward(backend, params, x);
        s.att = backend.causal_attention_forward(s.qkv, seq_len_, heads_, s.probs);
        return c_proj_.forward(backend, params, s.att);
    }

    // Selective recompute (train/recompute.hpp): the probabilities, heads x seq x seq per
    // sequence, are dropped after the forward and computed again from qkv by backward_input.
    static void drop_recomputable(saved& s) { s.probs = matrix(); }

    // Takes dy by value and keeps it (as s.d_out) for backward_weight: pass an rvalue to avoid a copy.
    [[nodiscard]] matrix backward_input(Backend& backend, std::span<const scalar> params, matrix dy, saved& s) const {
        if (s.probs.size() == 0)  // dropped by selective recompute: the same kernel, the same bits
            static_cast<void>(backend.causal_attention_forward(s.qkv, seq_len_, heads_, s.probs));
        s.d_out = std::move(dy);
        const matrix d_att = c_proj_.backward_input(backend, params, s.d_out);
        s.d_qkv = backend.causal_attention_backward(s.qkv, s.probs, d_att, seq_len_, heads_);
        s.qkv = matrix();
        s.probs = matrix();
        return c_attn_.backward_input(backend, params, s.d_qkv);
    }

    // x is the forward input.
    void backward_weight(Backend& backend, std::span<scalar> grads, const matrix& x, const saved& s) const {
        c_proj_.backward_weight(backend, grads, s.att, s.d_out);
        c_attn_.backward_weight(backend, grads, x, s.d_qkv);
    }

private:
    static const tp_group<scalar>& checked(const tp_group<scalar>& tp, int heads) {
        require(tp.size >= 1 && heads % tp.size == 0, "attention: num_heads", heads,
                "must be divisible by the tensor-parallel size tp = " + std::to_string(tp.size) +
                    " (each tp rank holds whole heads)");
        return tp;
    }

    linear<Backend> c_attn_;
    linear<Backend> c_proj_;
    int heads_ = 0;  // this rank's
    int seq_len_ = 0;
};

}  // namespace weft::nn
