// GPT's input layer: token embedding wte [vocab, width] plus learned position
// embedding wpe [seq_len, width]. Its input is token ids, so it has no input gradient;
// its whole backward is the weight half (a scatter-add into wte and wpe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "weft/exec/compute_backend.hpp"
#include "weft/nn/parameter_registry.hpp"
#include "weft/nn/token_view.hpp"

namespace weft::nn {

template <compute_backend Backend>
class embedding {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    struct saved {
        std::vector<std::int32_t> tokens;  // copied: the caller's buffer may be reused before W runs
        matrix d_out;                      // gradient of the output, kept for backward_weight
    };

    embedding() = default;
    // Registers "wte.weight" [vocab, width] and "wpe.weight" [seq_len, width].
    embedding(parameter_registry& registry, int vocab, int width, int seq_len)
        : vocab_(vocab), width_(width), seq_len_(seq_len) {
        wte_offset_ = registry.add("wte.weight", {vocab, width});
        wpe_offset_ = registry.add("wpe.weight", {seq_len, width});
    }

    [[nodiscard]] std::size_t wte_offset() const { return wte_offset_; }

    [[nodiscard]] matrix forward(std::span<const scalar> params, std::span<const std::int32_t> tokens,
                                 saved& s) const {
        s.tokens.assign(tokens.begin(), tokens.end());
        return Backend::embedding_forward(tokens, wte(params), wpe(params), vocab_, width_, seq_len_);
    }
    // Nothing upstream of token ids: only keeps dy for backward_weight.
    void backward_input(matrix dy, saved& s) const { s.d_out = std::move(dy); }
    void backward_weight(std::span<scalar> grads, const saved& s) const {
        Backend::embedding_backward_weight(s.tokens, s.d_out, wte(grads), wpe(grads), vocab_, seq_len_);
    }

private:
    template <class T>
    std::span<T> wte(std::span<T> buffer) const {
        return buffer.subspan(wte_offset_, std::size_t(vocab_) * std::size_t(width_));
    }
    template <class T>
    std::span<T> wpe(std::span<T> buffer) const {
        return buffer.subspan(wpe_offset_, std::size_t(seq_len_) * std::size_t(width_));
    }

    int vocab_ = 0;
    int width_ = 0;
    int seq_len_ = 0;
    std::size_t wte_offset_ = 0;
    std::size_t wpe_offset_ = 0;
};

}  // namespace weft::nn
