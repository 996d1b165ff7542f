// The shared GPT options (gpt_run_options.hpp) on a CLI11 command line, with one set of
// help texts; each trainer adds what limits it puts on them in `notes`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

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
    app.add_option("--layers", o.layers, "transformer blocks")->capture_default_str();
    app.add_option("--d-model", o.d_model, "model width")->capture_default_str();
    app.add_option("--heads", o.heads, with("attention heads", notes.heads))->capture_default_str();
    app.add_option("--vocab", o.vocab, "vocabulary size (256 for make_dataset's byte tokens)")->capture_default_str();
    app.add_option("--seq-len", o.seq_len, with("tokens per sequence", notes.seq_len))->capture_default_str();
    app.add_option("--batch", o.batch, with("sequences per step", notes.batch))->capture_default_str();
    app.add_option("--steps", o.steps, "training steps")->capture_default_str();
    app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "decoupled weight decay (2-D tensors only)")
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
