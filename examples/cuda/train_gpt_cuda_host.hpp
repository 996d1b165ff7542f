// The host half of examples/cuda/train_gpt_cuda: its options and their checks, the token
// file, the initial weights (seeded exactly as the CPU model, or from a checkpoint), the
// step log and the checkpoint it saves. Compiled by the host compiler: the .cu file sees
// only this header, so Eigen (the CPU layers), CLI11 and nlohmann/json stay out of nvcc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpt_run_options.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/parameter_registry.hpp"

namespace weft_examples {

// train_gpt's options and defaults where they overlap (gpt_run_options), plus AdamW's
// betas (torch.optim.AdamW's defaults, which train_gpt uses without offering them).
struct gpt_cuda_options : gpt_run_options {
    double beta1 = 0.9;
    double beta2 = 0.999;
    bool no_graph = false;
};

// Parses the command line into `options`. Returns -1 to go on, or the exit code to end
// with: 0 after --help, 2 (as for any other bad option) for a command line CLI11 cannot
// parse, after CLI11's message ("Could not convert: --heads = abc").
int parse_gpt_cuda_options(int argc, char** argv, gpt_cuda_options& options);

// Every check that needs no GPU: the model's sizes, including the CUDA kernels' limits,
// the optimizer's values and that --data is given. Throws weft::invalid_argument naming
// the option ("--heads = 5 is invalid: must divide --d-model = 64").
void validate(const gpt_cuda_options& options);

// What the training loop needs from the host. The constructor does every remaining check
// that needs no GPU: it reads --data (tokens below --vocab, enough of them for one batch)
// and --init-from (every tensor present, with the model's shape), and opens --log-json.
class gpt_cuda_host {
public:
    explicit gpt_cuda_host(const gpt_cuda_options& options);
    gpt_cuda_host(const gpt_cuda_host&) = delete;
    gpt_cuda_host& operator=(const gpt_cuda_host&) = delete;
    ~gpt_cuda_host();

    [[nodiscard]] const weft::nn::gpt_config& config() const;
    // nn::gpt_stage's registry over every unit: Hugging Face names, the CPU flat layout.
    [[nodiscard]] const weft::nn::parameter_registry& registry() const;
    // --init-from's weights, or nn::gpt_initialize's seeded draw (what gpt_stage<cpu> and
    // train_gpt start from). The draw can take tens of seconds for GPT-2 124M.
    [[nodiscard]] std::vector<float> initial_parameters() const;

    // AdamW's state (steps taken, moments in the CPU flat layout), as a checkpoint's
    // optimizer companion holds it.
    struct optimizer_state {
        std::uint64_t step = 0;
        std::vector<float> exp_avg, exp_avg_sq;
    };
    // The --init-from checkpoint's optimizer companion, when there is one (train_gpt and
    // train_gpt_cuda write it with --save); empty otherwise: AdamW then starts fresh.
    [[nodiscard]] const std::optional<optimizer_state>& initial_optimizer() const;

    // Step `step`'s batch as llm.c reads it (data::batch_at), into B*T ids each.
    void batch(long long step, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const;

    // Prints the run's first lines: the model, the device and the peak MFU is taken against.
    void print_header(const std::string& device, double peak_tflops, bool graph) const;
    // Prints the weft step line (and writes the --log-json object) of one step.
    void log_step(long long step, double loss, double milliseconds, double peak_tflops);
    // Writes `parameters` (CPU flat layout) to --save and `optimizer` to its companion
    // (train::optimizer_companion), each atomically; nothing without --save.
    void save(std::span<const float> parameters, const optimizer_state& optimizer) const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace weft_examples
