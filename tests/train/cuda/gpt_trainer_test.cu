// The whole GPT-2 on CUDA (train::cuda::gpt_trainer) against weft's CPU model
// (nn::gpt_stage<exec::cpu> and optim::adamw, see gpt_reference.cpp) within bf16
// tolerance: the loss and every parameter's gradient, five AdamW steps, a run resumed from
// saved weights and optimizer state, and a whole step captured into a CUDA graph whose
// replays equal eager steps bit for bit.
// `test_cuda_gpt_trainer gradients|adamw|graph` runs one part; exit 77 (skipped) without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device_check.hpp"
#include "gpt_reference.hpp"
#include "weft/exec/cuda/device_buffer.hpp"
#include "weft/train/cuda/gpt_trainer.cuh"
#include "weft/exec/cuda/graph.hpp"
#include "weft/exec/cuda/runtime.hpp"
#include "weft/exec/cuda/stream.hpp"

namespace cu = weft::cuda;
using weft::train::cuda::gpt_trainer;

namespace {

using weft_test::bits_equal;
using weft_test::expect;

// The constructor checks its arguments before any CUDA call, so these hold without a
// GPU; the message is checked so that a CUDA failure cannot pass for the validation.
template <class Fn>
void expect_invalid_argument(const std::string& what, Fn&& fn) {
    std::string message;
    try {
        fn();
    } catch (const weft::error& e) {
        message = e.what();
    }
    expect(message.find("is invalid") != std::string::npos,
           what + " throws weft::invalid_argument (got: \"" + message + "\")");
}

// ||got - want|| / ||want||, the measure tests/train uses for whole tensors.
double relative_difference(std::span<const float> got, std::span<const float> want) {
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double d = double(got[i]) - double(want[i]);
        diff += d * d;
        norm += double(want[i]) * double(want[i]);
    }
    return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// The brief's tiny model, except d_model 128 instead of 64: the CUDA attention kernel
// takes head sizes that are multiples of 32, and 4 heads of 32 keep the multi-head indexing.
weft::nn::gpt_config tiny_config() {
    weft::nn::gpt_config config;
    config.num_layers = 2;
    config.d_model = 128;
    config.num_heads = 4;
    config.vocab_size = 96;
    config.seq_len = 32;
    config.seed = 1234;
    return config;
}
constexpr int batch = 4;

// bf16 activations against the fp32 CPU model: one rounding (2^-9 relative) per stored
// value along a chain of a few dozen, so losses agree to ~1e-3 and gradients to ~1% (per
// tensor, relative L2). A wrong index or a missed term shows up as O(1).
constexpr double loss_tolerance = 1e-2;          // absolute, loss ~ log(96) = 4.56
constexpr double gradient_tolerance = 5e-2;      // relative L2 per tensor
constexpr double trained_loss_tolerance = 3e-2;  // absolute, after AdamW steps on both

struct token_batch {
    std::vector<std::int32_t> inputs, targets;
};

// llm.c-style: a stream of B*T + 1 tokens, inputs the first B*T, targets shifted by one.
// With 128 tokens over a vocabulary of 96 some ids repeat (the embedding backward sums
// several rows) and some never occur (their wte rows get only the head's gradient).
token_batch make_batch(const weft::nn::gpt_config& config, std::uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> token(0, config.vocab_size - 1);
    std::vector<std::int32_t> stream(std::size_t(batch) * std::size_t(config.seq_len) + 1);
    for (auto& t : stream) t = token(gen);
    return {{stream.begin(), stream.end() - 1}, {stream.begin() + 1, stream.end()}};
}

struct device_batch {
    cu::device_buffer<std::int32_t> inputs, targets;
    explicit device_batch(const token_batch& b)
        : inputs(std::span<const std::int32_t>(b.inputs)), targets(std::span<const std::int32_t>(b.targets)) {}
};

cu::adamw_hyperparameters test_hyperparameters() {
    cu::adamw_hyperparameters h;
    h.lr = 1e-3;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.eps = 1e-8;
    h.weight_decay = 0.1;
    return h;
}

// ---- checks that need no GPU: the constructor validates before any CUDA call ---------

void test_argument_validation() {
    const weft::nn::gpt_config config = tiny_config();
    const weft_test::gpt_reference cpu(config);
    const std::vector<float> params = cpu.parameters();

    weft::nn::gpt_config narrow_heads = config;
    narrow_heads.num_heads = 8;  // head_dim 16
    expect_invalid_argument("gpt_trainer with head_dim 16",
                            [&] { static_cast<void>(gpt_trainer(narrow_heads, cpu.registry(), params, batch)); });
    expect_invalid_argument("gpt_trainer with batch 0",
                            [&] { static_cast<void>(gpt_trainer(config, cpu.registry(), params, 0)); });
    expect_invalid_argument("gpt_trainer with one parameter missing", [&] {
        static_cast<void>(
            gpt_trainer(config, cpu.registry(), std::span<const float>(params).first(params.size() - 1), batch));
    });
    weft::nn::gpt_config other_vocab = config;
    other_vocab.vocab_size = 97;
    const weft_test::gpt_reference other(other_vocab);
    expect_invalid_argument("gpt_trainer with another model's registry", [&] {
        static_cast<void>(gpt_trainer(config, other.registry(), other.parameters(), batch));
    });
    weft::nn::gpt_config deeper = config;
    deeper.num_layers = 3;
    expect_invalid_argument("gpt_trainer with a registry lacking a block",
                            [&] { static_cast<void>(gpt_trainer(deeper, cpu.registry(), params, batch)); });
}

// ---- device tests -------------------------------------------------------------------

void test_gradients() {
    const weft::nn::gpt_config config = tiny_config();
    weft_test::gpt_reference cpu(config);
    const token_batch tokens = make_batch(config, 11);
    const float cpu_loss = cpu.forward_backward(tokens.inputs, tokens.targets, batch);

    gpt_trainer gpu(config, cpu.registry(), cpu.parameters(), batch);
    const device_batch d(tokens);
    cu::stream stream;
    gpu.enqueue_forward_backward(d.inputs.data(), d.targets.data(), stream);
    const float gpu_loss = gpu.loss();
    std::printf("loss: cuda %.6f, cpu %.6f\n", double(gpu_loss), double(cpu_loss));
    expect(std::isfinite(gpu_loss) && std::fabs(double(gpu_loss) - double(cpu_loss)) <= loss_tolerance,
           "forward loss within " + std::to_string(loss_tolerance) + " of the CPU model's");

    const std::vector<float> got = gpu.gradients();
    const std::vector<float> want = cpu.gradients();
    double worst = 0;
    std::string worst_name;
    for (const weft::nn::parameter_info& info : cpu.registry().entries()) {
        const auto g = std::span<const float>(got).subspan(info.offset, info.size);
        const auto w = std::span<const float>(want).subspan(info.offset, info.size);
        const double rel = relative_difference(g, w);
        const bool finite = std::all_of(g.begin(), g.end(), [](float x) { return std::isfinite(x); });
        std::printf("  grad %-26s relative L2 difference %.2e\n", info.name.c_str(), rel);
        expect(finite && rel <= gradient_tolerance, "gradient of " + info.name + ": relative L2 difference " +
                                                        std::to_string(rel) + " (tolerance " +
                                                        std::to_string(gradient_tolerance) + ")");
        if (!(rel <= worst)) {
            worst = rel;
            worst_name = info.name;
        }
    }
    std::printf("worst gradient: %s at %.2e\n", worst_name.c_str(), worst);

    // c_attn's gradient is dominated by its v columns at initialization (attention is
    // nearly uniform), which would hide a q or k error in the whole-tensor figure: check
    // the q, k and v column blocks of the weight on their own, more loosely for q and k
    // (small gradients, more bf16 noise relative to their size; a wrong term is O(1)).
    const int C = config.d_model;
    for (int l = 0; l < config.num_layers; ++l) {
        const std::string name = "h." + std::to_string(l) + ".attn.c_attn.weight";
        const weft::nn::parameter_info& info = cpu.registry().find(name);
        for (int part = 0; part < 3; ++part) {
            std::vector<float> g, w;  // rows C, columns [part * C, (part + 1) * C) of [C, 3C]
            for (int r = 0; r < C; ++r)
                for (int c = part * C; c < (part + 1) * C; ++c) {
                    const std::size_t i = info.offset + std::size_t(r) * std::size_t(3 * C) + std::size_t(c);
                    g.push_back(got[i]);
                    w.push_back(want[i]);
                }
            const double rel = relative_difference(g, w);
            const char* which = part == 0 ? "q" : part == 1 ? "k" : "v";
            const double tolerance = part == 2 ? gradient_tolerance : 3 * gradient_tolerance;
            std::printf("  grad %s, %s columns: relative L2 difference %.2e\n", name.c_str(), which, rel);
            expect(rel <= tolerance, "gradient of " + name + ", " + which + " columns: relative L2 difference " +
                                         std::to_string(rel) + " (tolerance " + std::to_string(tolerance) + ")");
        }
    }

    // The forward alone runs the same kernels: the same loss, bit for bit.
    gpu.enqueue_forward(d.inputs.data(), d.targets.data(), stream);
    const float forward_loss = gpu.loss();
    expect(std::memcmp(&forward_loss, &gpu_loss, sizeof(float)) == 0,
           "enqueue_forward's loss equals enqueue_forward_backward's, bit for bit");

    bool threw = false;
    try {
        cu::adamw_hyperparameters bad = test_hyperparameters();
        bad.lr = 0;
        gpu.enqueue_step(d.inputs.data(), d.targets.data(), bad, stream);
    } catch (const weft::error&) {
        threw = true;
    }
    expect(threw, "enqueue_step with lr = 0 throws weft::error");
}

void test_adamw_steps() {
    constexpr int steps = 5;
    const weft::nn::gpt_config config = tiny_config();
    weft_test::gpt_reference cpu(config);
    gpt_trainer gpu(config, cpu.registry(), cpu.parameters(), batch);
    const token_batch tokens = make_batch(config, 12);  // the same batch every step: the loss must fall
    const device_batch d(tokens);
    const cu::adamw_hyperparameters h = test_hyperparameters();
    cu::stream stream;
    std::vector<float> cpu_losses, gpu_losses;
    for (int step = 0; step < steps; ++step) {
        cpu_losses.push_back(
            cpu.adamw_step(tokens.inputs, tokens.targets, batch, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay));
        gpu.enqueue_step(d.inputs.data(), d.targets.data(), h, stream);
        gpu_losses.push_back(gpu.loss());
        std::printf("step %d: loss cuda %.6f, cpu %.6f\n", step + 1, double(gpu_losses.back()),
                    double(cpu_losses.back()));
        expect(std::isfinite(gpu_losses.back()) &&
                   std::fabs(double(gpu_losses.back()) - double(cpu_losses.back())) <= trained_loss_tolerance,
               "loss of AdamW step " + std::to_string(step + 1) + " within " + std::to_string(trained_loss_tolerance) +
                   " of the CPU engine's");
    }
    expect(gpu_losses.back() < gpu_losses.front() - 0.01f, "five AdamW steps on one batch lower the loss");
    expect(gpu.step_count() == steps, "the optimizer counted " + std::to_string(steps) + " steps");
    // Informational: AdamW's first steps move every weight by about lr whatever the
    // gradient's size, so weights whose tiny gradient changes sign under bf16 drift apart
    // by O(lr) without changing the loss; the losses above are the check.
    std::printf("weights after %d steps: relative L2 difference %.2e\n", steps,
                relative_difference(gpu.parameters(), cpu.parameters()));
}

// Stopping after 2 steps, moving weights and optimizer state into a fresh model (as a
// checkpoint and its optimizer companion do) and going on gives the uninterrupted run's
// losses and weights bit for bit.
void test_resume() {
    constexpr int before = 2, after = 2;
    const weft::nn::gpt_config config = tiny_config();
    const weft_test::gpt_reference cpu(config);
    const device_batch d(make_batch(config, 14));
    const cu::adamw_hyperparameters h = test_hyperparameters();
    cu::stream stream;

    gpt_trainer straight(config, cpu.registry(), cpu.parameters(), batch);
    std::vector<float> straight_losses;
    for (int step = 0; step < before + after; ++step) {
        straight.enqueue_step(d.inputs.data(), d.targets.data(), h, stream);
        straight_losses.push_back(straight.loss());
    }

    gpt_trainer first(config, cpu.registry(), cpu.parameters(), batch);
    for (int step = 0; step < before; ++step) first.enqueue_step(d.inputs.data(), d.targets.data(), h, stream);
    const gpt_trainer::optimizer_state saved = first.optimizer();
    expect(saved.step == before, "optimizer() reports the steps taken");
    gpt_trainer resumed(config, cpu.registry(), first.parameters(), batch);
    resumed.restore_optimizer(saved.step, saved.exp_avg, saved.exp_avg_sq);
    expect(resumed.step_count() == before, "restore_optimizer sets the step count");
    std::vector<float> resumed_losses;
    for (int step = 0; step < after; ++step) {
        resumed.enqueue_step(d.inputs.data(), d.targets.data(), h, stream);
        resumed_losses.push_back(resumed.loss());
    }
    const std::vector<float> tail(straight_losses.begin() + before, straight_losses.end());
    expect(bits_equal(resumed_losses, tail), "resumed losses == uninterrupted losses, bit for bit");
    expect(bits_equal(resumed.parameters(), straight.parameters()), "resumed weights == uninterrupted, bit for bit");

    bool threw = false;
    try {
        resumed.restore_optimizer(1, std::vector<float>(3), saved.exp_avg_sq);
    } catch (const weft::error&) {
        threw = true;
    }
    expect(threw, "restore_optimizer with moments of the wrong size throws weft::error");
}

void test_graph_replay() {
    constexpr int steps = 3;
    const weft::nn::gpt_config config = tiny_config();
    const weft_test::gpt_reference cpu(config);
    const std::vector<float> initial = cpu.parameters();
    gpt_trainer gpu(config, cpu.registry(), initial, batch);
    const device_batch d(make_batch(config, 13));
    const cu::adamw_hyperparameters h = test_hyperparameters();
    cu::stream stream;

    std::vector<float> eager_losses;
    for (int step = 0; step < steps; ++step) {
        gpu.enqueue_step(d.inputs.data(), d.targets.data(), h, stream);
        eager_losses.push_back(gpu.loss());
    }
    const std::vector<float> eager_params = gpu.parameters();
    const std::vector<float> eager_grads = gpu.gradients();

    gpu.reset(initial);
    const cu::graph step =
        cu::graph::capture(stream, [&](cudaStream_t s) { gpu.enqueue_step(d.inputs.data(), d.targets.data(), h, s); });
    expect(step.node_count() >= 60, "the captured step holds every kernel and GEMM of both blocks (" +
                                        std::to_string(step.node_count()) + " nodes)");
    std::vector<float> replay_losses;
    for (int i = 0; i < steps; ++i) {
        step.launch(stream);
        replay_losses.push_back(gpu.loss());
    }
    std::printf("losses eager %.7f %.7f %.7f, replay %.7f %.7f %.7f\n", double(eager_losses[0]),
                double(eager_losses[1]), double(eager_losses[2]), double(replay_losses[0]), double(replay_losses[1]),
                double(replay_losses[2]));
    expect(bits_equal(replay_losses, eager_losses), "graph replay losses == eager losses, bit for bit");
    expect(bits_equal(gpu.parameters(), eager_params), "graph replay weights == eager weights, bit for bit");
    expect(bits_equal(gpu.gradients(), eager_grads), "graph replay gradients == eager gradients, bit for bit");
    expect(gpu.step_count() == steps, "each replay advanced the optimizer's step counter");
    expect(eager_losses.back() < eager_losses.front(), "the steps lower the loss");
}

}  // namespace

int main(int argc, char** argv) {
    return weft_test::run_device_test(argc, argv, {"gradients", "adamw", "graph"}, test_argument_validation,
                                      [](std::string_view part) {
                                          if (part == "gradients") {
                                              test_gradients();
                                          } else if (part == "adamw") {
                                              test_adamw_steps();
                                              test_resume();
                                          } else {
                                              test_graph_replay();
                                          }
                                      });
}
