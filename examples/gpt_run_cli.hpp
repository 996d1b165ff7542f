// The shared GPT options (gpt_run_options.hpp) on a CLI11 command line, with one set of
// help texts; each trainer adds what limits it puts on them in `notes`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli_checks.hpp"
#include "gpt_run_options.hpp"

namespace weft_examples {

// Extra help for the options whose limits differ between the trainers.
struct gpt_option_notes {
    std::string heads;
    std::string seq_len;
    std::string batch;
};

inline void add_gpt_run_options(CLI::App& app, gpt_run_options& o, const gpt_option_notes& notes) {
    const auto with = [](const std::string& help, const std::string& note) {
        return note.empty() ? help : help + " (" + note + ")";
    };
    // The bounds are gpt_config's (far above any real model, low enough that sizes cannot
    // overflow); checking them here names the option.
    const auto sized = [&](const char* name, int& value, const std::string& help, int most) {
        app.add_option(name, value, help)->check(int_in(1, most))->capture_default_str();
    };
    sized("--layers", o.layers, "transformer blocks", weft::nn::gpt_config::max_layers);
    sized("--d-model", o.d_model, "model width", weft::nn::gpt_config::max_width);
    sized("--heads", o.heads, with("attention heads", notes.heads), weft::nn::gpt_config::max_width);
    sized("--vocab", o.vocab, "vocabulary size (256 for make_dataset's byte tokens)", weft::nn::gpt_config::max_vocab);
    sized("--seq-len", o.seq_len, with("tokens per sequence", notes.seq_len), weft::nn::gpt_config::max_seq_len);
    sized("--batch", o.batch, with("sequences per step", notes.batch), 1 << 24);
    app.add_option("--steps", o.steps, "training steps")->check(int_in(0, 1 << 30))->capture_default_str();
    app.add_option("--lr", o.lr, "learning rate")->check(finite_at_least(0, false))->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "decoupled weight decay (2-D tensors only)")
        ->check(finite_at_least(0, true))
        ->capture_default_str();
    app.add_option("--seed", o.seed, "seed of the initial weights (the same draw on the CPU and the GPU)")
        ->capture_default_str();
    app.add_option("--data", o.data, "llm.c token file (.bin)");
    app.add_option("--init-from", o.init_from,
                   "safetensors checkpoint to start from (and its .optimizer companion); a weft checkpoint "
                   "also restores the step and data position, so training continues where it was saved");
    app.add_option("--save", o.save, "write a safetensors checkpoint (and the optimizer companion) at the end");
    app.add_option("--log-json", o.log_json, "write one JSON object per step: step, loss, ms, tokens_per_s, bubble");
}

}  // namespace weft_examples
