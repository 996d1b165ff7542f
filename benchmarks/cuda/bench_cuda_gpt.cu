// A whole GPT-2 training step on one GPU (train::cuda::gpt_trainer: forward, backward,
// AdamW) for GPT-2 124M and 350M at seq 1024: a few eager steps to warm up, the step
// captured into a CUDA graph, then timed replays. Prints ms/step, tokens/s, TFLOP/s and
// MFU with llm.c's formula (train::gpt_flops_per_token) against the device's dense bf16
// peak (train::bf16_peak_tflops). Exits 77 without a GPU.
//   bench_cuda_gpt [timed steps]     (default 10)
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "gpt_host_model.hpp"
#include "weft/exec/cuda/device_buffer.hpp"
#include "weft/train/cuda/gpt_trainer.cuh"
#include "weft/exec/cuda/graph.hpp"
#include "weft/exec/cuda/runtime.hpp"
#include "weft/exec/cuda/stream.hpp"
#include "weft/train/mfu.hpp"

namespace cu = weft::cuda;
using weft::train::cuda::gpt_trainer;

namespace {

struct model_spec {
    const char* name;
    int layers, d_model, heads, batch;
};

void run(const model_spec& spec, int timed_steps, double peak) {
    weft::nn::gpt_config config;
    config.num_layers = spec.layers;
    config.d_model = spec.d_model;
    config.num_heads = spec.heads;
    config.vocab_size = 50257;  // GPT-2's, unpadded: the model's layout is the CPU model's
    config.seq_len = 1024;
    const int tokens = spec.batch * config.seq_len;

    cu::stream stream;
    gpt_trainer model = [&] {
        const weft_bench::gpt_host_model host = weft_bench::make_gpt_host_model(config);
        return gpt_trainer(config, host.registry, host.parameters, spec.batch);
    }();

    // Uniform random tokens: the step's cost does not depend on which tokens they are.
    std::mt19937 gen(7);
    std::uniform_int_distribution<int> token(0, config.vocab_size - 1);
    std::vector<std::int32_t> stream_tokens(std::size_t(tokens) + 1);
    for (auto& t : stream_tokens) t = token(gen);
    const std::span<const std::int32_t> all(stream_tokens);
    const cu::device_buffer<std::int32_t> inputs(all.first(std::size_t(tokens)));
    const cu::device_buffer<std::int32_t> targets(all.subspan(1));

    cu::adamw_hyperparameters h;  // GPT-2 small's
    h.lr = 6e-4;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.weight_decay = 0.1;
    const auto step = [&](cudaStream_t s) { model.enqueue_step(inputs.data(), targets.data(), h, s); };

    // Eager steps warm up cuBLASLt's algorithm choice (made on first use, outside the graph).
    constexpr int eager_steps = 2;
    cu::event eager_start, eager_stop;
    step(stream);
    const float first_loss = model.loss();  // synchronizes
    eager_start.record(stream);
    for (int i = 1; i < eager_steps; ++i) step(stream);
    eager_stop.record(stream);
    eager_stop.synchronize();
    const double eager_ms = double(eager_stop.elapsed_ms_since(eager_start)) / (eager_steps - 1);

    const cu::graph graph = cu::graph::capture(stream, step);
    graph.launch(stream);  // one untimed replay: the graph's first launch uploads it
    const double ms = weft_bench::time_ms(stream, 0, timed_steps, [&] { graph.launch(stream); });
    const float last_loss = model.loss();

    const double seconds = ms * 1e-3;
    const double tokens_per_s = double(tokens) / seconds;
    const double flops_per_token =
        weft::train::gpt_flops_per_token(config.parameter_count(), config.num_layers, config.d_model, config.seq_len);
    const double tflops = flops_per_token * tokens_per_s / 1e12;
    const double mfu = weft::train::mfu(flops_per_token, double(tokens), seconds, peak);
    char mfu_text[32] = "n/a (unknown peak)";
    if (mfu >= 0) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100.0 * mfu);
    std::printf(
        "%-9s | %lld params | B %d x T %d | graph %.1f ms/step (eager %.1f) | %.0f tok/s | %.1f TFLOP/s | "
        "MFU %s | loss step 1 %.4f, step %d %.4f\n",
        spec.name, static_cast<long long>(config.parameter_count()), spec.batch, config.seq_len, ms, eager_ms,
        tokens_per_s, tflops, mfu_text, double(first_loss), eager_steps + 1 + timed_steps, double(last_loss));
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (!weft_bench::have_gpu()) return 77;
        const int timed_steps = argc > 1 ? std::atoi(argv[1]) : 10;
        if (timed_steps <= 0) {
            std::fprintf(stderr, "timed steps = %s is invalid: must be a positive integer\n", argv[1]);
            return 2;
        }
        const std::string device = cu::device_name(0);
        const double peak = weft::train::bf16_peak_tflops(device);
        std::printf("device: %s, dense bf16 peak %s TFLOP/s; flops/token = 6 N + 6 L C T (llm.c)\n", device.c_str(),
                    peak > 0 ? std::to_string(int(peak)).c_str() : "unknown");
        for (const model_spec& spec :
             {model_spec{"gpt2-124M", 12, 768, 12, 16}, model_spec{"gpt2-350M", 24, 1024, 16, 8}})
            run(spec, timed_steps, peak);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_gpt: %s\n", e.what());
        return 1;
    }
}
