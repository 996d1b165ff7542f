// examples/sample_gpt: generates text from a GPT-2 checkpoint that train_gpt saved, so that
// you can see what a run learned. It reads the model's sizes from the checkpoint, runs the
// whole model in this process (no pipeline: one stage holds every layer), and draws each
// next token with a temperature and top-k from a seed (nn/sampling.hpp).
//
//   train_gpt --data data/train.bin --steps 2000 --checkpoint-dir ckpt
//   sample_gpt --checkpoint ckpt --prompt "Everyone is permitted" --tokens 200 --top-k 40
//
// With make_dataset's byte tokens (vocab 256) the prompt and the output are text; with
// another vocabulary they are token ids (--prompt-tokens 464,2068 in, ids out), since weft
// ships no tokenizer.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "weft/run/options.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/io/checkpoint.hpp"
#include "weft/io/checkpoint_manifest.hpp"
#include "weft/io/checkpoint_root.hpp"
#include "weft/io/safetensors.hpp"
#include "weft/models/gpt.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/nn/sampling.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/checkpoint_directory.hpp"

namespace {

struct sample_options {
    std::string checkpoint;
    std::string prompt;
    std::vector<int> prompt_tokens;
    int tokens = 200;
    double temperature = 1.0;
    int top_k = 40;
    unsigned long long seed = 1337;
};

// The weights file `path` names: a .safetensors file, or a checkpoint directory (or a root
// whose `latest` names one), checked against its manifest first, with the model the manifest
// records (empty for a file). Only the weights are checked: sampling reads nothing else.
std::pair<std::filesystem::path, std::string> weights_of(const std::string& path) {
    if (!std::filesystem::is_directory(path)) return {path, {}};
    const auto directory = weft::io::resolve_checkpoint(path, "--checkpoint");
    const auto manifest = weft::io::read_manifest(directory);
    weft::io::verify_checkpoint_file(
        directory, weft::io::required_entry(directory, manifest, weft::train::weights_file_name));
    return {directory / weft::train::weights_file_name, manifest.model};
}

int run(const sample_options& o) {
    const weft::nn::sampling_options sampling{.temperature = o.temperature, .top_k = o.top_k, .seed = o.seed};
    sampling.validate();
    const auto [path, manifest_model] = weights_of(o.checkpoint);
    const weft::io::safetensors_file weights = weft::io::read_safetensors(path);
    const auto described = weights.metadata().find(std::string(weft::train::model_key));
    if (described == weights.metadata().end())
        throw weft::invalid_argument("--checkpoint", path.string(),
                                     "records no model (weft.model): use a checkpoint that train_gpt saved");
    weft::require(manifest_model.empty() || manifest_model == described->second,
                  "\"model\" of the manifest beside " + path.string(), manifest_model,
                  "the weights record \"" + described->second + "\": the files come from different saves, or the "
                  "manifest was edited");
    const weft::nn::gpt_config model = weft::models::gpt::parse_description(described->second);

    weft::exec::cpu backend;
    const weft::nn::unit_range all_units{0, model.num_units()};
    auto tensors = weft::nn::gpt_stage<weft::exec::cpu>::initial_tensors(model, all_units);
    weft::io::load_checkpoint(weights, tensors.registry(), tensors.parameters());
    const weft::nn::gpt_stage<weft::exec::cpu> stage(backend, model, all_units, tensors);

    const bool bytes = model.vocab_size == 256;
    std::vector<std::int32_t> context;
    if (!o.prompt.empty()) {
        weft::require(bytes, "--prompt", o.prompt,
                      "needs the byte vocabulary (256) of make_dataset; this model has " +
                          std::to_string(model.vocab_size) + " tokens: give --prompt-tokens");
        for (const unsigned char c : o.prompt) context.push_back(c);
    }
    for (const int t : o.prompt_tokens) {
        weft::require(t >= 0 && t < model.vocab_size, "--prompt-tokens", t,
                      "must be token ids in [0, " + std::to_string(model.vocab_size) + ")");
        context.push_back(t);
    }
    if (context.empty()) context.push_back(bytes ? '\n' : 0);
    std::fprintf(stderr, "sample_gpt | %s | %s | temperature %g | top-k %d | seed %llu\n",
                 described->second.c_str(), path.c_str(), o.temperature, o.top_k, o.seed);

    const auto emit = [&](std::int32_t token, bool first) {
        if (bytes)
            std::fputc(static_cast<unsigned char>(token), stdout);
        else
            std::printf(first ? "%d" : ",%d", token);
    };
    for (std::size_t i = 0; i < context.size(); ++i) emit(context[i], i == 0);
    for (int n = 0; n < o.tokens; ++n) {
        // The last seq_len tokens, padded on the right: attention is causal, so the padding
        // does not change the logits of the last real position.
        const std::size_t length = std::min(context.size(), static_cast<std::size_t>(model.seq_len));
        std::vector<std::int32_t> window(context.end() - static_cast<std::ptrdiff_t>(length), context.end());
        window.resize(static_cast<std::size_t>(model.seq_len), 0);
        typename weft::nn::gpt_stage<weft::exec::cpu>::stash saved;
        const auto logits = stage.forward(weft::nn::token_view{window, 1, model.seq_len}, saved);
        const std::span<const float> last(logits.data() + (length - 1) * static_cast<std::size_t>(logits.cols()),
                                          static_cast<std::size_t>(logits.cols()));
        const int token = weft::nn::sample_token(last, sampling, context.size());
        context.push_back(token);
        emit(token, false);
        std::fflush(stdout);
    }
    std::fputc('\n', stdout);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Generate text from a GPT-2 checkpoint of train_gpt (temperature, top-k, seed)."};
    sample_options o;
    app.add_option("--checkpoint", o.checkpoint,
                   "a checkpoint directory, a --checkpoint-dir (its latest), or a .safetensors file of train_gpt")
        ->required();
    app.add_option("--prompt", o.prompt, "text to continue (byte vocabulary); default: a newline");
    app.add_option("--prompt-tokens", o.prompt_tokens, "token ids to continue, e.g. 464,2068")->delimiter(',');
    app.add_option("--tokens", o.tokens, "tokens to generate")
        ->check(weft::run::int_in(0, 1 << 20))
        ->capture_default_str();
    app.add_option("--temperature", o.temperature, "softmax temperature (0: greedy, the most likely token)")
        ->check(weft::run::finite_at_least(0, true))
        ->capture_default_str();
    app.add_option("--top-k", o.top_k, "draw from the k most likely tokens (0: all)")
        ->check(weft::run::int_in(0, 1 << 24))
        ->capture_default_str();
    app.add_option("--seed", o.seed, "seed of the draws: the same seed gives the same text")->capture_default_str();
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sample_gpt: %s\n", e.what());
        return 2;
    }
}
