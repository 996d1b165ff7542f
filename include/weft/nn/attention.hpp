// Causal multi-head self-attention as GPT-2 has it: one c_attn projection to
// [q | k | v], softmax(q k^T / sqrt(d)) v per (sequence, head) under a causal mask,
// and the c_proj output projection. Backward is split: the core has no weights, so
// backward_input does all of it and keeps only what the two projections' W need.
#pragma once

#include <span>
#include <string>
#include <utility>

#include "weft/exec/compute_backend.hpp"
#include "weft/nn/linear.hpp"
#include "weft/nn/parameter_registry.hpp"

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
    attention(parameter_registry& registry, const std::string& prefix, int width, int heads, int seq_len)
        : c_attn_(registry, prefix + ".c_attn", width, 3 * width),
          c_proj_(registry, prefix + ".c_proj", width, width),
          heads_(heads),
          seq_len_(seq_len) {}

    // x: [sequences * seq_len, width], token-major.
    [[nodiscard]] matrix forward(std::span<const scalar> params, const matrix& x, saved& s) const {
        s.qkv = c_attn_.forward(params, x);
        s.att = Backend::causal_attention_forward(s.qkv, seq_len_, heads_, s.probs);
        return c_proj_.forward(params, s.att);
    }

    // Takes dy by value and keeps it (as s.d_out) for backward_weight: pass an rvalue to avoid a copy.
    [[nodiscard]] matrix backward_input(std::span<const scalar> params, matrix dy, saved& s) const {
        s.d_out = std::move(dy);
        const matrix d_att = c_proj_.backward_input(params, s.d_out);
        s.d_qkv = Backend::causal_attention_backward(s.qkv, s.probs, d_att, seq_len_, heads_);
        s.qkv = matrix();
        s.probs = matrix();
        return c_attn_.backward_input(params, s.d_qkv);
    }

    // x is the forward input.
    void backward_weight(std::span<scalar> grads, const matrix& x, const saved& s) const {
        c_proj_.backward_weight(grads, s.att, s.d_out);
        c_attn_.backward_weight(grads, x, s.d_qkv);
    }

private:
    linear<Backend> c_attn_;
    linear<Backend> c_proj_;
    int heads_ = 0;
    int seq_len_ = 0;
};

}  // namespace weft::nn
