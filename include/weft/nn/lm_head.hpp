// GPT-2's head: the final LayerNorm ln_f and logits = ln_f(x) wte^T, the LM head tied
// to the token embedding. The head uses "wte.weight" already registered by an embedding
// in the same stage, or registers it itself when the stage holds no embedding.
// Tensor parallelism splits wte by vocabulary rows as the embedding does: each rank
// computes its own columns of the logits (vocab_parallel_cross_entropy takes them).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/layer_norm.hpp"
#include "weft/nn/tensor_parallel.hpp"

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
    // Under a tp group of size n this rank's wte rows are split_range(vocab, rank, n), and
    // forward returns those columns of the logits; ln_f stays whole. The input gradient
    // (d of ln_f's output) is all-reduced over the group in backward_input, which makes ln_f's
    // input gradient and its weight gradients the same on every tp rank without more traffic.
    lm_head(parameter_registry& registry, int vocab, int width, const tp_group<scalar>& tp = {})
        : ln_f_(registry, "ln_f", width), width_(width) {
        const tensor_split split{0, 1, tp.rank, tp.size};
        if (registry.contains("wte.weight")) {
            const auto& info = registry.find("wte.weight");
            std::string shape;
            for (int d : info.shape) shape += (shape.empty() ? "[" : ", ") + std::to_string(d);
            require(info.shape == std::vector<int>{vocab, width}, "lm_head: wte.weight shape", shape + "]",
                    "must be [vocab = " + std::to_string(vocab) + ", width = " + std::to_string(width) +
                        "] to tie the head to it");
            require(info.split == (tp.size == 1 ? tensor_split{} : split), "lm_head: wte.weight split",
                    "dim " + std::to_string(info.split.dim) + ", index " + std::to_string(info.split.index) +
                        " of " + std::to_string(info.split.count),
                    "must be this head's vocabulary split (dim 0, index " + std::to_string(tp.rank) + " of " +
                        std::to_string(tp.size) + ") to tie the head to it");
            wte_offset_ = info.offset;
        } else {
            wte_offset_ = registry.add("wte.weight", {vocab, width}, split);
        }
        rows_ = split_range(vocab, tp.rank, tp.size);
        if (tp.size > 1) tp_ = tp;
    }

    // The vocabulary rows of wte this rank holds: its columns of the logits.
    [[nodiscard]] index_range vocab_rows() const { return rows_; }

    [[nodiscard]] matrix forward(Backend& backend, std::span<const scalar> params, matrix x, saved& s) const {
        s.x = std::move(x);
        s.normed = ln_f_.forward(backend, params, s.x, s.mean, s.rstd);
        return backend.transposed_linear_forward(s.normed, wte(params), rows_.size(), width_);
    }

    // The input given as two terms a + b (the last block's output, not yet added): their sum is
    // kept as the input and normalized by ln_f in one kernel where the backend fuses the two.
    [[nodiscard]] matrix forward(Backend& backend, std::span<const scalar> params, const matrix& a, const matrix& b,
                                 saved& s) const {
        s.normed = ln_f_.forward_residual(backend, params, a, b, s.x, s.mean, s.rstd);
        return backend.transposed_linear_forward(s.normed, wte(params), rows_.size(), width_);
    }

    [[nodiscard]] matrix backward_input(Backend& backend, std::span<const scalar> params, matrix dy, saved& s) const {
        s.d_out = std::move(dy);
        s.d_normed = backend.transposed_linear_backward_input(s.d_out, wte(params), rows_.size(), width_);
        // Each rank's part is through its own vocabulary columns; ln_f's output fed all of them.
        allreduce_sum(backend, tp_, s.d_normed);
        return ln_f_.backward_input(backend, params, s.x, s.mean, s.rstd, s.d_normed);
    }

    void backward_weight(Backend& backend, std::span<scalar> grads, const saved& s) const {
        backend.transposed_linear_backward_weight(s.normed, s.d_out, wte(grads));
        ln_f_.backward_weight(backend, grads, s.x, s.mean, s.rstd, s.d_normed);
    }

private:
    template <class T>
    std::span<T> wte(std::span<T> buffer) const {
        return buffer.subspan(wte_offset_, std::size_t(rows_.size()) * std::size_t(width_));
    }

    layer_norm<Backend> ln_f_;
    int width_ = 0;
    index_range rows_;  // this rank's wte rows
    std::size_t wte_offset_ = 0;
    tp_group<scalar> tp_;  // only set when split
};

}  // namespace weft::nn
