// train_gpt's options and its run on run::trainer, shared by train_gpt.cpp (the command line,
// the CPU) and train_gpt_cuda_device.cpp (--device cuda), which instantiate it in separate
// translation units. What is GPT's own: the token files, the header line and MFU's FLOPs.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "weft/weft.hpp"
#include "weft/core/compiled_for.hpp"
#include "weft/data/token_batches.hpp"
#include "weft/io/token_file.hpp"
#include "weft/models/gpt.hpp"
#include "weft/run/trainer.hpp"

namespace weft_examples::train_gpt {

struct run_options : weft::run::settings {
    weft::run::gpt_sizes sizes;
    std::string device = "cpu";          // or cuda: one GPU per rank (train_gpt_cuda_device.cpp)
    std::string gpu_comm = "host-staged";  // with cuda: host-staged, nccl or cuda-aware-mpi
    bool cuda_graphs = false;
    std::string attention_kernel = "wmma";

    [[nodiscard]] weft::nn::gpt_config model() const {
        return {.num_layers = sizes.layers, .d_model = sizes.d_model, .num_heads = sizes.heads,
                .vocab_size = sizes.vocab, .seq_len = sizes.seq_len, .seed = seed};
    }
};

// The run on `world` with the backend make_backend() returns (exec::cpu, or exec::cuda over a
// device-memory communicator); default_peak_tflops(world) is MFU's peak without --peak-tflops.
template <weft::communicator Comm, class MakeBackend, class DefaultPeak>
void train(Comm& world, const run_options& o, MakeBackend&& make_backend, DefaultPeak&& default_peak_tflops) {
    using engine_t = weft::engine<weft::sched::all_schedules, weft::shard::any_zero, Comm,
                                  std::invoke_result_t<MakeBackend&>, weft::models::gpt>;
    weft::require(!o.data.empty(), "--data", o.data, "name an llm.c token file (make one with make_dataset --out-dir DIR)");
    const auto read_tokens = [&](const std::string& path, const char* option) {
        auto file = weft::io::read_token_file(path);
        for (const auto token : file.tokens())
            if (token >= o.sizes.vocab)
                throw weft::invalid_argument("--vocab", o.sizes.vocab, std::string("the ") + option + " file holds token " +
                                                                           std::to_string(token) + "; use a larger --vocab");
        return file;
    };
    const auto tokens = read_tokens(o.data, "--data");
    std::optional<weft::io::token_file> val_tokens;
    if (!o.val_data.empty()) val_tokens = read_tokens(o.val_data, "--val-data");
    const auto model = o.model();
    weft::run::trainer<engine_t> trainer(world, o, model);
    if (val_tokens)
        trainer.validation([&](int b) { return weft::data::batch_at(*val_tokens, b, o.batch, o.sizes.seq_len); });
    const std::int64_t parameters = model.parameter_count();  // the whole model, tied wte once
    trainer
        .throughput(o.sizes.seq_len,
                    weft::train::gpt_flops_per_token(parameters, o.sizes.layers, o.sizes.d_model, o.sizes.seq_len),
                    [&] { return default_peak_tflops(world); })
        .manifest({{"program", "train_gpt"}, {"seq_len", o.sizes.seq_len}})
        .on_start([&](engine_t& engine) {
            if (world.rank() != 0) return;
            int threads = 1;  // a rank's kernel threads (--threads; the GPU's are its own)
            if constexpr (requires { engine.backend().threads(); }) threads = engine.backend().threads();
            // --program: the file is the schedule.
            std::string schedule = o.program.empty() ? "schedule " + o.schedule : "program " + o.program;
            if (o.recompute != "none") schedule.append(" | recompute ").append(o.recompute);
            std::printf("weft train_gpt | %lld parameters | layers %d | d_model %d | heads %d | vocab %d | seq %d | "
                        "batch %d | %s | pp %d | dp %d | tp %d | zero %d | microbatches %d | chunks %d | "
                        "threads %d | %s\n",
                        static_cast<long long>(parameters), o.sizes.layers, o.sizes.d_model, o.sizes.heads,
                        o.sizes.vocab, o.sizes.seq_len, o.batch, schedule.c_str(), o.pp, o.dp, o.tp, o.zero,
                        o.microbatches, engine.config().chunks(), threads,
                        weft::describe_build_target(WEFT_COMPILED_FOR, weft::cpu_instruction_sets()).c_str());
        })
        .on_finish([&](engine_t& engine) {
            if (world.rank() != 0 || engine.is_spare()) return;
            if constexpr (requires { engine.backend().memory_high_water(); }) {
                try {  // a figure for the log: a failed query must not stop the checkpoint and save
                    const auto high = engine.backend().memory_high_water();
                    std::printf("device memory | most held at once on GPU %d (all of its ranks): stream pool %.1f "
                                "MiB | action graphs %.1f MiB\n",
                                engine.backend().device(), double(high.stream_pool_bytes) / 1048576,
                                double(high.graph_bytes) / 1048576);
                } catch (const std::exception& e) {
                    std::printf("device memory | unavailable: %s\n", e.what());
                }
            }
            if constexpr (requires { engine.backend().action_graph_launches(); })
                if (o.cuda_graphs)
                    std::printf("cuda graphs | %zu action graph launches on rank 0 (one per F, B, I and W from each "
                                "action's second call)\n",
                                engine.backend().action_graph_launches());
        })
        .run([&](std::uint64_t i) { return weft::data::batch_at(tokens, static_cast<long long>(i), o.batch,
                                                                o.sizes.seq_len); },
             make_backend);
}

}  // namespace weft_examples::train_gpt
