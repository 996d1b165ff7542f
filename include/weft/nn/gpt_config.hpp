// The shape of the GPT-2 model: token and position embeddings, pre-LayerNorm
// transformer blocks, final LayerNorm and an LM head tied to the token embedding.
// Its units (0 = embedding, 1..num_layers = blocks, num_layers+1 = head) are what pipeline stages split.
#pragma once

#include <cstdint>
#include <string>

#include "weft/core/error.hpp"

namespace weft::nn {

struct gpt_config {
    int num_layers = 0;
    int d_model = 0;
    int num_heads = 0;
    int vocab_size = 0;
    int seq_len = 0;  // tokens per sequence: every micro-batch uses exactly this many (wpe rows)
    std::uint64_t seed = 1234;

    // Far above any real model, low enough that no size or parameter count overflows:
    // 2^16 blocks of width 2^20 hold 12 * 2^56 parameters, below 2^63.
    static constexpr int max_layers = 1 << 16;
    static constexpr int max_width = 1 << 20;      // d_model, and so num_heads
    static constexpr int max_vocab = 1 << 24;
    static constexpr int max_seq_len = 1 << 24;

    [[nodiscard]] int num_units() const { return num_layers + 2; }
    [[nodiscard]] int head_dim() const { return d_model / num_heads; }
    // Parameters of the whole model, the tied wte once: embeddings V*C + T*C, per block
    // 12C^2 + 13C (qkv, attention proj, 4x MLP, two LayerNorms), final LayerNorm 2C.
    // What MFU counts, without building the model.
    [[nodiscard]] std::int64_t parameter_count() const {
        const std::int64_t c = d_model;
        return (static_cast<std::int64_t>(vocab_size) + seq_len) * c + num_layers * (12 * c * c + 13 * c) + 2 * c;
    }

    void validate() const {
        const auto in = [](int low, int high) {
            return "must be in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
        };
        require(num_layers >= 1 && num_layers <= max_layers, "gpt_config.num_layers", num_layers, in(1, max_layers));
        require(d_model >= 1 && d_model <= max_width, "gpt_config.d_model", d_model, in(1, max_width));
        require(num_heads >= 1, "gpt_config.num_heads", num_heads, "must be at least 1");
        require(d_model % num_heads == 0, "gpt_config.num_heads", num_heads,
                "must divide d_model = " + std::to_string(d_model));
        require(vocab_size >= 2 && vocab_size <= max_vocab, "gpt_config.vocab_size", vocab_size, in(2, max_vocab));
        require(seq_len >= 1 && seq_len <= max_seq_len, "gpt_config.seq_len", seq_len, in(1, max_seq_len));
    }
};

}  // namespace weft::nn
