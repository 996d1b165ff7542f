// GPT-2's head: the final LayerNorm ln_f and logits = ln_f(x) wte^T, the LM head tied
// to the token embedding. The head uses "wte.weight" already registered by an embedding
// in the same stage, or registers it itself when the stage holds no embedding.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/layer_norm.hpp"
#include "weft/nn/parameter_registry.hpp"

namespace weft::nn {

template <compute_backend Backend>
class lm_head {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    struct saved {
        matrix x, mean, rstd, normed;  // head input, ln_f statistics and output
        matrix d_out;                  // dlogits, kept for the wte gradient
        matrix d_normed;               // ln_f's dY
    };

    lm_head() = default;
    // Registers "ln_f.weight", "ln_f.bias" and, unless present, "wte.weight" [vocab, width].
    lm_head(parameter_registry& registry, int vocab, int width)
        : ln_f_(registry, "ln_f", width), vocab_(vocab), width_(width) {
        if (registry.contains("wte.weight")) {
            const auto& info = registry.find("wte.weight");
            std::string shape;
            for (int d : info.shape) shape += (shape.empty() ? "[" : ", ") + std::to_string(d);
            require(info.shape == std::vector<int>{vocab, width}, "lm_head: wte.weight shape", shape + "]",
                    "must be [vocab = " + std::to_string(vocab) + ", width = " + std::to_string(width) +
                        "] to tie the head to it");
            wte_offset_ = info.offset;
        } else {
            wte_offset_ = registry.add("wte.weight", {vocab, width});
        }
    }

    [[nodiscard]] matrix forward(std::span<const scalar> params, matrix x, saved& s) const {
        s.x = std::move(x);
        s.normed = ln_f_.forward(params, s.x, s.mean, s.rstd);
        return Backend::transposed_linear_forward(s.normed, wte(params), vocab_, width_);
    }

    [[nodiscard]] matrix backward_input(std::span<const scalar> params, matrix dy, saved& s) const {
        s.d_out = std::move(dy);
        s.d_normed = Backend::transposed_linear_backward_input(s.d_out, wte(params), vocab_, width_);
        return ln_f_.backward_input(params, s.x, s.mean, s.rstd, s.d_normed);
    }

    void backward_weight(std::span<scalar> grads, const saved& s) const {
        Backend::transposed_linear_backward_weight(s.normed, s.d_out, wte(grads));
        ln_f_.backward_weight(grads, s.x, s.mean, s.rstd, s.d_normed);
    }

private:
    template <class T>
    std::span<T> wte(std::span<T> buffer) const {
        return buffer.subspan(wte_offset_, std::size_t(vocab_) * std::size_t(width_));
    }

    layer_norm<Backend> ln_f_;
    int vocab_ = 0;
    int width_ = 0;
    std::size_t wte_offset_ = 0;
};

}  // namespace weft::nn
