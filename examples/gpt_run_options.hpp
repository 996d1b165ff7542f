// The options train_gpt (CPU, pipelines) and cuda/train_gpt_cuda (one GPU) share: one set
// of names and defaults for the model, the data, AdamW and the files, so that the same
// command line means the same run on both. Plain data: nvcc compiles it too (through
// cuda/train_gpt_cuda_host.hpp), so the command-line parsing lives in gpt_run_cli.hpp.
#pragma once

#include <string>

#include "weft/nn/gpt_config.hpp"

namespace weft_examples {

struct gpt_run_options {
    int layers = 4;
    int d_model = 128;
    int heads = 4;
    int vocab = 256;
    int seq_len = 64;
    int batch = 8;
    int steps = 20;
    double lr = 3e-4;
    double weight_decay = 0.0;
    unsigned long long seed = 1234;
    std::string data;
    std::string init_from;
    std::string save;
    std::string log_json;

    [[nodiscard]] weft::nn::gpt_config model() const {
        return {.num_layers = layers, .d_model = d_model, .num_heads = heads, .vocab_size = vocab,
                .seq_len = seq_len, .seed = seed};
    }
};

}  // namespace weft_examples
