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
        require(num_layers >= 1, "gpt_config.num_layers", num_layers, "must be at least 1");
        require(d_model >= 1, "gpt_config.d_model", d_model, "must be at least 1");
        require(num_heads >= 1, "gpt_config.num_heads", num_heads, "must be at least 1");
        require(d_model % num_heads == 0, "gpt_config.num_heads", num_heads,
                "must divide d_model = " + std::to_string(d_model));
        require(vocab_size >= 2, "gpt_config.vocab_size", vocab_size, "must be at least 2");
        require(seq_len >= 1, "gpt_config.seq_len", seq_len, "must be at least 1");
    }
};

}  // namespace weft::nn
