#include "train_gpt_cuda_host.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include "gpt_run_cli.hpp"
#include "weft/core/error.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/gpt_init.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/io/checkpoint.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/mfu.hpp"
#include "weft/io/safetensors.hpp"
#include "weft/train/step_log.hpp"
#include "weft/data/token_batches.hpp"
#include "weft/io/token_file.hpp"

namespace weft_examples {

namespace {

// The CUDA attention kernel's head sizes and sequence bound, and gpt_trainer's batch bound
// (train/cuda/gpt_trainer.cuh checks them too, but only once it is constructed: after the
// GPU check). Restated here so that a bad size is an option error on any machine.
constexpr int head_dim_multiple = 32;
constexpr int max_head_dim = 128;
constexpr int max_seq_len = 8192;
constexpr int max_batch = 65535;


}  // namespace

int parse_gpt_cuda_options(int argc, char** argv, gpt_cuda_options& o) {
    CLI::App app{
        "Train GPT-2 on one GPU (train::cuda::gpt_trainer) on an llm.c token file; "
        "the single-GPU counterpart of train_gpt."};
    add_gpt_run_options(app, o,
                        {.heads = "--d-model / --heads: a multiple of 32 up to 128", .seq_len = "at most 8192", .batch = ""});
    app.add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
    app.add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
    app.add_flag("--no-graph", o.no_graph, "run every step eagerly instead of replaying a captured CUDA graph");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;  // app.exit prints the help or the error
    }
    return -1;
}

void validate(const gpt_cuda_options& o) {
    using weft::require;
    require(o.layers >= 1, "--layers", o.layers, "must be at least 1");
    require(o.d_model >= 1, "--d-model", o.d_model, "must be at least 1");
    require(o.heads >= 1, "--heads", o.heads, "must be at least 1");
    require(o.d_model % o.heads == 0, "--heads", o.heads, "must divide --d-model = " + std::to_string(o.d_model));
    const int head_dim = o.d_model / o.heads;
    require(head_dim % head_dim_multiple == 0 && head_dim <= max_head_dim, "--heads", o.heads,
            "--d-model / --heads = " + std::to_string(head_dim) + " must be a multiple of " +
                std::to_string(head_dim_multiple) + " in [" + std::to_string(head_dim_multiple) + ", " +
                std::to_string(max_head_dim) + "] (the CUDA attention kernel's head sizes)");
    require(o.vocab >= 2, "--vocab", o.vocab, "must be at least 2");
    require(o.seq_len >= 1 && o.seq_len <= max_seq_len, "--seq-len", o.seq_len,
            "must be in [1, " + std::to_string(max_seq_len) + "] (the CUDA attention kernel's bound)");
    require(o.batch >= 1 && o.batch <= max_batch, "--batch", o.batch,
            "must be in [1, " + std::to_string(max_batch) + "]");
    require(static_cast<long long>(o.batch) * o.seq_len <= INT_MAX, "--batch", o.batch,
            "times --seq-len must fit in an int (the GEMMs take int sizes)");
    require(o.steps >= 0, "--steps", o.steps, "must be non-negative");
    require(o.lr > 0, "--lr", o.lr, "must be positive");
    require(o.weight_decay >= 0, "--weight-decay", o.weight_decay, "must be non-negative");
    require(o.beta1 >= 0 && o.beta1 < 1, "--beta1", o.beta1, "must be in [0, 1)");
    require(o.beta2 >= 0 && o.beta2 < 1, "--beta2", o.beta2, "must be in [0, 1)");
    require(!o.data.empty(), "--data", o.data, "name an llm.c token file (make one with make_dataset --out-dir DIR)");
    if (!o.save.empty()) {
        // Found now rather than after the training it would lose.
        const std::filesystem::path parent = std::filesystem::path(o.save).parent_path();
        std::error_code code;
        require(parent.empty() || std::filesystem::is_directory(parent, code), "--save", o.save,
                "must be in an existing directory");
    }
}

struct gpt_cuda_host::impl {
    gpt_cuda_options options;
    weft::nn::gpt_config config;
    weft::io::token_file tokens;
    weft::nn::parameter_registry registry;
    std::vector<float> loaded;  // --init-from's weights; empty without it
    std::optional<optimizer_state> optimizer;  // its optimizer companion's state, if any
    std::ofstream log;
};

gpt_cuda_host::gpt_cuda_host(const gpt_cuda_options& o) : impl_(std::make_unique<impl>()) {
    validate(o);
    impl& m = *impl_;
    m.options = o;
    m.config = o.model();
    m.config.validate();

    m.tokens = weft::io::read_token_file(o.data);
    for (const auto token : m.tokens.tokens())
        if (token >= o.vocab)
            throw weft::invalid_argument("--vocab", o.vocab,
                                         "the data holds token " + std::to_string(token) + "; use a larger --vocab");
    static_cast<void>(weft::data::batches_per_epoch(m.tokens, o.batch, o.seq_len));  // enough tokens for a batch

    m.registry = weft::nn::gpt_stage<weft::exec::cpu>::layout(m.config, {0, m.config.num_units()});
    if (!o.init_from.empty()) {
        m.loaded.assign(m.registry.total_size(), 0.0f);
        weft::io::load_checkpoint(o.init_from, m.registry, m.loaded);  // names and shapes checked
        const auto companion = weft::train::optimizer_companion(o.init_from);
        std::error_code code;
        if (std::filesystem::exists(companion, code)) {
            // Through optim::adamw, so the file is checked exactly as train_gpt checks it.
            weft::optim::adamw restored({.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .weight_decay = o.weight_decay});
            restored.import_state(weft::io::load_optimizer_state(companion, m.registry, "adamw",
                                                                 weft::optim::adamw::state_names));
            optimizer_state state;
            state.step = restored.step_count();
            state.exp_avg.assign(restored.exp_avg().begin(), restored.exp_avg().end());
            state.exp_avg_sq.assign(restored.exp_avg_sq().begin(), restored.exp_avg_sq().end());
            if (state.step == 0) {  // a fresh optimizer's file: no moments, start from zeros
                state.exp_avg.assign(m.registry.total_size(), 0.0f);
                state.exp_avg_sq.assign(m.registry.total_size(), 0.0f);
            }
            m.optimizer = std::move(state);
        }
    }
    if (!o.log_json.empty()) {
        m.log.open(o.log_json);
        weft::require(m.log.good(), "--log-json", o.log_json, "must be a writable file path");
    }
}

gpt_cuda_host::~gpt_cuda_host() = default;

const weft::nn::gpt_config& gpt_cuda_host::config() const {
    return impl_->config;
}
const weft::nn::parameter_registry& gpt_cuda_host::registry() const {
    return impl_->registry;
}

const std::optional<gpt_cuda_host::optimizer_state>& gpt_cuda_host::initial_optimizer() const {
    return impl_->optimizer;
}

std::vector<float> gpt_cuda_host::initial_parameters() const {
    if (!impl_->loaded.empty()) return impl_->loaded;
    std::vector<float> parameters(impl_->registry.total_size());
    weft::nn::gpt_initialize(impl_->registry, std::span<float>(parameters), impl_->config.seed,
                             impl_->config.num_layers);
    return parameters;
}

void gpt_cuda_host::batch(long long step, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const {
    const auto& o = impl_->options;
    const weft::data::token_batch batch = weft::data::batch_at(impl_->tokens, step, o.batch, o.seq_len);
    weft::require(inputs.size() == batch.inputs.size() && targets.size() == batch.targets.size(),
                  "gpt_cuda_host::batch: inputs.size()", inputs.size(),
                  "must be batch * seq_len = " + std::to_string(batch.inputs.size()));
    std::copy(batch.inputs.begin(), batch.inputs.end(), inputs.begin());
    std::copy(batch.targets.begin(), batch.targets.end(), targets.begin());
}

void gpt_cuda_host::print_header(const std::string& device, double peak_tflops, bool graph) const {
    const auto& o = impl_->options;
    std::printf(
        "weft train_gpt_cuda | %lld parameters | layers %d | d_model %d | heads %d | vocab %d | seq %d | "
        "batch %d | %s\n",
        static_cast<long long>(impl_->config.parameter_count()), o.layers, o.d_model, o.heads, o.vocab, o.seq_len,
        o.batch, graph ? "CUDA graph after step 0" : "eager (--no-graph)");
    if (peak_tflops > 0)
        std::printf("device %s | MFU against its dense bf16 peak of %.0f TFLOP/s\n", device.c_str(), peak_tflops);
    else
        std::printf("device %s | its bf16 peak is unknown to weft: MFU is not reported\n", device.c_str());
    std::fflush(stdout);
}

void gpt_cuda_host::log_step(long long step, double loss, double milliseconds, double peak_tflops) {
    const auto& o = impl_->options;
    const double tokens = static_cast<double>(o.batch) * o.seq_len;
    const double flops_per_token =
        weft::train::gpt_flops_per_token(impl_->config.parameter_count(), o.layers, o.d_model, o.seq_len);
    weft::train::step_stats stats;
    stats.step = step;
    stats.loss = loss;
    stats.milliseconds = milliseconds;
    stats.lr = o.lr;
    stats.tokens_per_second = tokens / (milliseconds / 1e3);
    stats.bubble = 0;  // one GPU, no pipeline
    stats.mfu = weft::train::mfu(flops_per_token, tokens, milliseconds / 1e3, peak_tflops);
    std::printf("%s\n", weft::train::format_step(stats).c_str());
    std::fflush(stdout);
    if (impl_->log.is_open()) impl_->log << weft::train::format_step_json(stats) << '\n' << std::flush;
}

void gpt_cuda_host::save(std::span<const float> parameters, const optimizer_state& optimizer) const {
    const auto& o = impl_->options;
    if (o.save.empty()) return;
    const weft::io::stage_parameters whole{impl_->registry, parameters};
    weft::io::save_checkpoint(o.save, std::span(&whole, 1));  // write_safetensors: atomic
    // The companion in the format train_gpt writes and reads (AdamW's state tensors).
    const std::array<weft::optim::state_tensor_view<float>, 2> views{{{"exp_avg", optimizer.exp_avg},
                                                                        {"exp_avg_sq", optimizer.exp_avg_sq}}};
    const weft::io::stage_optimizer_state stage{impl_->registry, "adamw", optimizer.step, views};
    weft::io::save_optimizer_state(weft::train::optimizer_companion(o.save), std::span(&stage, 1));
    std::printf("saved %s and %s\n", o.save.c_str(), weft::train::optimizer_companion(o.save).string().c_str());
}

}  // namespace weft_examples
