// train_gpt's run: its options, and the training loop over a communicator and a compute
// backend, shared by train_gpt.cpp (the command line, the CPU) and train_gpt_cuda_device.cpp
// (--device cuda), which instantiate it in separate translation units.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/weft.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/exec/operation_times.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/checkpoint_directory.hpp"
#include "weft/models/gpt.hpp"
#include "weft/train/lr_schedule.hpp"
#include "weft/train/mfu.hpp"
#include "weft/data/token_batches.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/io/token_file.hpp"
#include "gpt_run_options.hpp"
#include "launch.hpp"
#include "layout_switch_option.hpp"
#include "stop_signal.hpp"

namespace weft_examples::train_gpt {


struct run_options : weft_examples::gpt_run_options {
    std::string schedule = "1f1b";
    int pp = 1;
    int dp = 1;
    int tp = 1;
    int zero = 0;
    int chunks = 0;
    int ranks = 0;
    double comm_timeout = 300;  // seconds a rank waits on a peer before it aborts the job
    int microbatches = 4;
    std::string optimizer = "adamw";
    double peak_tflops = 0;  // 0: this CPU's measured GEMM rate, or the GPU's bf16 peak from weft's table
    std::string device = "cpu";  // cpu, or cuda: one GPU per rank (train_gpt_cuda_device.cpp)
    // With --device cuda, what carries activations and reductions between GPUs: host-staged
    // (the world's communicator, through host memory) or nccl (MPI ranks only).
    std::string gpu_comm = "host-staged";
    bool cuda_graphs = false;  // --device cuda: each F, B, I and W captured once, then replayed
    std::string attention_kernel = "wmma";  // --device cuda: wmma, or mma (not yet run on a GPU)
    bool kernel_profile = false;  // --device cuda: each operation's GPU time per step, printed at the end
    std::vector<int> partition;  // units per stage; empty = balanced by estimated flops
    int skip_nonfinite = 0;      // non-finite steps tolerated (not applied) before the run stops
    long long warmup_steps = 0;
    double min_lr = 0;           // 0: --lr (no decay)
    long long decay_steps = -1;  // -1: --steps, the step the run ends at
    double grad_clip = 0;        // the global gradient norm to clip to; 0: no clipping
    std::string val_data;        // an llm.c token file for the validation loss
    long long val_every = 0;     // 0: the validation loss at the end only
    int val_batches = 8;         // batches of --batch sequences per validation loss
    std::string checkpoint_dir;  // a root of checkpoint directories (step-<n>/, latest)
    long long checkpoint_every = 0;  // 0: only at the end (and when stopped by a signal)
    int keep = 0;                    // newest checkpoints kept; 0: all
    std::string resume;              // a checkpoint directory, or a root whose `latest` names one
    std::vector<std::string> switches;  // --switch STEP:key=value,... (layout_switch_option.hpp)
    double staging_mib = 64;            // the staging cap of a switch's transfers
};

// train_gpt's exit codes beyond 0 and 2 (docs/gpt.md lists them all): a non-finite step
// ended the run; SIGTERM or SIGINT stopped it after a step (and a checkpoint).
constexpr int exit_nonfinite = 3;
constexpr int exit_stopped_by_signal = 4;
// --device cuda on a machine without a GPU: the code ctest reads as "skipped", as the CUDA
// tests end without one.
constexpr int exit_no_gpu = 77;

// What a checkpoint's manifest keeps of this run besides the model and the layout: the
// settings a resumed run should be given again.
inline nlohmann::json run_settings(const run_options& o, long long decay_steps) {
    return {{"program", "train_gpt"}, {"data", o.data}, {"batch", o.batch}, {"seq_len", o.seq_len},
            {"steps", o.steps}, {"lr", o.lr}, {"min_lr", o.min_lr > 0 ? o.min_lr : o.lr},
            {"warmup_steps", o.warmup_steps}, {"decay_steps", decay_steps}, {"optimizer", o.optimizer},
            {"weight_decay", o.weight_decay}, {"grad_clip", o.grad_clip}, {"seed", o.seed}};
}


// One line: the most any rank holds (training state between steps, its in-step peak, and
// activations), from the engine's memory report (docs/parallelism.md has the formulas).
template <weft::communicator Comm, class Engine>
void report_memory(Comm& world, const Engine& engine) {
    const auto m = engine.is_spare() ? weft::train::memory_report{} : engine.memory();  // a spare holds nothing
    double most[5] = {double(m.between_steps.parameters), double(m.between_steps.gradients),
                      double(m.between_steps.optimizer_state), double(m.peak.total()), double(m.peak_activations)};
    std::vector<double> all(5 * static_cast<std::size_t>(world.size()));
    world.allgather(std::span<const double>(most), std::span<double>(all));
    for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r)
        for (std::size_t i = 0; i < 5; ++i) most[i] = std::max(most[i], all[5 * r + i]);
    if (world.rank() == 0)
        std::printf("memory per rank (most of any rank) | params %.2f MiB | grads %.2f MiB | optimizer %.2f MiB | "
                    "state peak in step %.2f MiB | activations peak %.2f MiB\n",
                    most[0] / 1048576, most[1] / 1048576, most[2] / 1048576, most[3] / 1048576, most[4] / 1048576);
}

// A --switch checked against the model and the ranks launched: its layout can run.
struct planned_switch {
    long long step;
    weft::parallel_config config;
    std::vector<int> partition;
    std::string text;
};

// Every --switch, parsed and checked at start-up, before anything trains: each names its
// whole layout (omitted keys take train_gpt's defaults, world keeps its value), and the
// steps come in increasing order below --steps.
template <class Engine>
std::vector<planned_switch> plan_switches(const run_options& o, int launched, const weft::nn::gpt_config& model,
                                          const weft::train::engine_options& options) {
    weft::require(o.staging_mib * 1048576.0 >= sizeof(float), "--staging-mib", o.staging_mib,
                  "must hold at least one element (" + std::to_string(sizeof(float)) + " bytes)");
    std::vector<planned_switch> out;
    int world = launched;
    for (const std::string& text : o.switches) {
        const auto s = weft_examples::parse_layout_switch(text);
        weft::require(s.step < o.steps, "--switch " + text + ": STEP", s.step,
                      "must be below --steps " + std::to_string(o.steps) +
                          " (a switch comes before a step, and the run ends at --steps)");
        weft::require(out.empty() || s.step > out.back().step, "--switch " + text + ": STEP", s.step,
                      "must come after the previous --switch's step; give the switches in order of their steps");
        const int w = s.world != 0 ? s.world : world;
        weft::require(w <= launched, "--switch " + text + ": world", w,
                      "must be at most the " + std::to_string(launched) +
                          " ranks launched (a smaller world leaves the others as spares)");
        try {
            const auto schedule = weft::sched::parse_schedule_kind(s.schedule);
            const weft::parallel_config config({.pp = s.pp, .dp = s.dp, .tp = s.tp, .zero_stage = s.zero,
                                                .microbatches = o.microbatches,
                                                .chunks = s.chunks != 0 ? s.chunks : schedule.default_chunks(),
                                                .schedule = schedule, .world_size = w});
            auto switched = options;
            switched.partition = s.partition;
            static_cast<void>(Engine::layout_type::layout_of(config, model, switched));
            out.push_back({s.step, config, s.partition, text});
        } catch (const weft::error& e) {
            throw weft::invalid_argument("--switch", text, std::string("cannot run: ") + e.what());
        }
        world = w;
    }
    return out;
}

// The training run on `world` with the backend make_backend() returns (exec::cpu, or
// exec::cuda over a device-memory communicator: train_gpt_cuda_device.cpp), made once every
// option and the data are checked, so that bad input is reported before a missing GPU;
// default_peak_tflops(world) is what MFU is measured against when --peak-tflops is not given.
template <weft::communicator Comm, class MakeBackend, class DefaultPeak>
void train(Comm& world, const run_options& o, MakeBackend&& make_backend, DefaultPeak&& default_peak_tflops) {
    using Backend = std::invoke_result_t<MakeBackend&>;
    world.set_timeout(std::chrono::duration<double>(o.comm_timeout));  // the engine's groups inherit it
    // The run's own votes and reports (stops, memory) are host values: over the host side of
    // a device communicator (comm::with_host), the world itself otherwise.
    auto& host = weft::comm::host_side(world);
    // any_zero: the ZeRO stage is a run-time choice (--zero), like the schedule.
    using engine_t = weft::engine<weft::sched::all_schedules, weft::shard::any_zero, Comm, Backend,
                                  weft::models::gpt>;
    const auto schedule = weft::sched::parse_schedule_kind(o.schedule);
    const weft::parallel_config config({.pp = o.pp, .dp = o.dp, .tp = o.tp, .zero_stage = o.zero,
                                        .microbatches = o.microbatches,
                                        .chunks = o.chunks != 0 ? o.chunks : schedule.default_chunks(),
                                        .schedule = schedule, .world_size = world.size()});
    const weft::nn::gpt_config model = o.model();
    weft::require(!o.data.empty(), "--data", o.data,
                  "name an llm.c token file (make one with make_dataset --out-dir DIR)");
    const auto read_tokens = [&](const std::string& path, const char* option) {
        auto file = weft::io::read_token_file(path);
        for (const auto token : file.tokens())
            if (token >= o.vocab)
                throw weft::invalid_argument("--vocab", o.vocab,
                                             std::string("the ") + option + " file holds token " +
                                                 std::to_string(token) + "; use a larger --vocab");
        return file;
    };
    const auto tokens = read_tokens(o.data, "--data");
    std::optional<weft::io::token_file> val_tokens;
    if (!o.val_data.empty()) val_tokens = read_tokens(o.val_data, "--val-data");

    weft::require(o.resume.empty() || o.init_from.empty(), "--resume", o.resume,
                  "cannot be combined with --init-from: --resume continues a run from its checkpoint directory, "
                  "--init-from starts one from weights");
    if (!o.checkpoint_dir.empty() && world.rank() == 0)
        weft::io::prepare_checkpoint_root(o.checkpoint_dir, "--checkpoint-dir");
    if (!o.save.empty() && world.rank() == 0) {
        // Before training, not after it: a missing or read-only directory, or a device or
        // a link at the path, must not cost the trained model. Checkpoints go through
        // rank 0, so it checks (and tidies what killed saves left there).
        for (const auto& file : {std::filesystem::path(o.save), weft::train::optimizer_companion(o.save)}) {
            weft::io::require_writable(file, "--save");
            weft::io::remove_stale_temporaries(file);
        }
    }
    const auto optimizer = weft::optim::parse_optimizer_kind(o.optimizer);
    const weft::train::engine_options engine_options{
        .batch_size = o.batch,
        .optimizer = {.kind = optimizer, .lr = o.lr, .weight_decay = o.weight_decay},
        .partition = o.partition,
        .grad_clip = o.grad_clip};
    const std::vector<planned_switch> switches = plan_switches<engine_t>(o, world.size(), model, engine_options);
    engine_t engine(world, config, model, engine_options, make_backend());
    // What a checkpoint brings in lives where the engine's state does (a GPU's memory).
    const weft::state_memory_scope state_memory(engine.backend().state_memory());
    if (!o.init_from.empty()) weft::train::load(engine, o.init_from);
    if (!o.resume.empty()) {
        const auto manifest = weft::train::load_checkpoint_directory(engine, o.resume, "--resume");
        if (world.rank() == 0)
            std::printf("resumed at step %llu from %s (saved as pp %d | dp %d | tp %d | zero %d | %s)\n",
                        static_cast<unsigned long long>(manifest.step), o.resume.c_str(), manifest.layout.pp,
                        manifest.layout.dp, manifest.layout.tp, manifest.layout.zero,
                        manifest.layout.schedule.c_str());
    }

    const std::int64_t parameters = model.parameter_count();  // the whole model, tied wte once
    const double flops_per_token = weft::train::gpt_flops_per_token(parameters, o.layers, o.d_model, o.seq_len);
    const double peak_tflops = o.peak_tflops > 0 ? o.peak_tflops : default_peak_tflops(world);
    std::ofstream log;
    if (world.rank() == 0 && !o.log_json.empty()) {
        log.open(o.log_json);
        weft::require(log.good(), "--log-json", o.log_json, "must be a writable file path");
    }
    if (world.rank() == 0)
        std::printf("weft train_gpt | %lld parameters | layers %d | d_model %d | heads %d | vocab %d | seq %d | "
                    "batch %d | schedule %s | pp %d | dp %d | tp %d | zero %d | microbatches %d | chunks %d\n",
                    static_cast<long long>(parameters), o.layers, o.d_model, o.heads, o.vocab, o.seq_len, o.batch,
                    o.schedule.c_str(), o.pp, o.dp, o.tp, o.zero, o.microbatches, config.chunks());
    // The schedule is a function of the global step, and --steps is the step the run ends
    // at, so a resumed run continues its learning rates.
    const weft::train::lr_schedule lr{.lr = o.lr, .min_lr = o.min_lr > 0 ? o.min_lr : o.lr,
                                      .warmup_steps = o.warmup_steps,
                                      .decay_steps = o.decay_steps >= 0 ? o.decay_steps : o.steps};
    lr.validate();
    // Steps taken: every rank counts them, spares too, so that all of them reach each switch.
    long long steps_taken = static_cast<long long>(engine.progress().step);
    const auto steps_done = [&] { return steps_taken; };
    if (world.rank() == 0 && steps_done() >= o.steps)
        std::printf("already at step %lld, the --steps %d this run ends at: nothing to train\n", steps_done(),
                    o.steps);
    long long saved_step = -1;
    const auto checkpoint = [&] {
        if (engine.is_spare()) {  // the layout's ranks save it
            saved_step = steps_done();
            return;
        }
        const auto saved =
            weft::train::save_checkpoint_directory(engine, o.checkpoint_dir, run_settings(o, lr.decay_steps), o.keep);
        saved_step = steps_done();
        if (world.rank() == 0) {
            std::printf("saved checkpoint %s\n", saved.directory.c_str());
            std::fflush(stdout);
        }
    };
    // The validation loss: the mean of --val-batches batches from the start of --val-data,
    // forwards only (engine.evaluate), the same batches every time so that values compare.
    long long validated_step = -1;
    const auto validate = [&] {
        if (engine.is_spare()) {
            validated_step = steps_done();
            return;
        }
        double sum = 0;
        for (int b = 0; b < o.val_batches; ++b)
            sum += engine.evaluate(weft::data::batch_at(*val_tokens, b, o.batch, o.seq_len));
        const double val_loss = sum / o.val_batches;
        validated_step = steps_done();
        if (world.rank() == 0) {
            std::printf("val loss %.4f | after %lld steps | %d batches\n", val_loss, steps_done(), o.val_batches);
            std::fflush(stdout);
            if (log.is_open())
                log << "{\"step\": " << steps_done() << ", \"val_loss\": " << weft::train::json_number(val_loss)
                    << "}\n" << std::flush;
        }
    };
    // Switches before the step a resumed run starts at happened in the run it resumes.
    std::size_t next_switch = 0;
    while (next_switch < switches.size() && switches[next_switch].step < steps_done()) ++next_switch;
    if (world.rank() == 0 && next_switch > 0)
        std::printf("resumed past %zu --switch(es): training goes on in the layout given by --pp, --dp, --tp, --zero\n",
                    next_switch);
    const auto staging_bytes = static_cast<std::size_t>(o.staging_mib * 1048576.0);
    const auto apply_switch = [&](const planned_switch& s) {
        const auto report = engine.reconfigure(s.config, {.partition = s.partition, .staging_bytes = staging_bytes});
        if (world.rank() != 0) return;
        std::printf("switch | before step %lld | %s\n", s.step, report.summary().c_str());
        std::fflush(stdout);
        if (log.is_open())
            log << nlohmann::ordered_json{{"event", "switch"},
                                          {"step", s.step},
                                          {"from", report.from},
                                          {"to", report.to},
                                          {"moved_bytes", report.bytes_moved},
                                          {"lower_bound_bytes", report.lower_bound_bytes},
                                          {"milliseconds", 1e3 * report.seconds},
                                          {"gb_per_second", report.gigabytes_per_second()},
                                          {"staging_peak_bytes", report.staging_peak_bytes},
                                          {"memory_peak_bytes", report.memory_peak_bytes},
                                          {"memory_bound_bytes", report.memory_bound_bytes}}
                       .dump()
                << '\n'
                << std::flush;
    };
    // While the layout leaves ranks as spares, they learn from rank 0 (always in the layout)
    // whether the run stops after this step; every rank calls this once per step.
    const auto stop_heard_from_rank_0 = [&](bool stop) {
        if (engine.config().world_size() == world.size()) return stop;
        int flag[1] = {stop ? 1 : 0};
        host.broadcast(std::as_writable_bytes(std::span<int>(flag)), 0);
        return flag[0] != 0;
    };
    // --kernel-profile: rank 0 times its process's kernels and GEMMs (every rank thread's)
    // from the run's second step on; the first is warm-up (allocations, cuBLASLt's choices).
    constexpr bool can_profile = requires { engine.backend().take_operation_times(); };
    const bool profiling = can_profile && o.kernel_profile && world.rank() == 0 && !engine.is_spare();
    std::vector<weft::operation_time> profile_totals;
    long long profiled_steps = 0;  // the warm-up step included
    double profiled_milliseconds = 0;
    if constexpr (can_profile)
        if (profiling) engine.backend().enable_operation_profile(true);
    int nonfinite_steps = 0;
    while (steps_done() < o.steps) {
        while (next_switch < switches.size() && switches[next_switch].step == steps_done())
            apply_switch(switches[next_switch++]);
        // A spare only keeps count, and follows rank 0's stops.
        if (engine.is_spare()) {
            ++steps_taken;
            if (stop_heard_from_rank_0(false))
                throw weft_examples::run_stopped("the run stopped on rank 0", exit_nonfinite);
            if (weft_examples::agreed_stop_signal(host) != 0)
                throw weft_examples::run_stopped("stopped by a signal", exit_stopped_by_signal);
            continue;
        }
        const double step_lr = lr.at(steps_done());
        engine.set_learning_rate(step_lr);
        // The batch at the engine's data position: a run loaded from a weft checkpoint goes on
        // from where it was saved (step numbers too), as if it had not stopped.
        const auto batch_index =
            static_cast<long long>(engine.progress().samples / static_cast<std::uint64_t>(o.batch));
        // What ran since the last step (validation, a checkpoint, a switch) is not the step's.
        if constexpr (can_profile)
            if (profiling) static_cast<void>(engine.backend().take_operation_times());
        auto stats = engine.step(weft::data::batch_at(tokens, batch_index, o.batch, o.seq_len));
        ++steps_taken;
        const double tokens_per_step = static_cast<double>(o.batch) * o.seq_len;
        stats.lr = step_lr;
        stats.tokens_per_second = tokens_per_step / (stats.milliseconds / 1e3);
        stats.mfu = weft::train::mfu(flops_per_token, tokens_per_step, stats.milliseconds / 1e3, peak_tflops);
        if constexpr (can_profile)
            if (profiling) {
                const auto times = engine.backend().take_operation_times();
                if (++profiled_steps > 1) {  // the first is warm-up
                    weft::accumulate_operation_times(profile_totals, times);
                    profiled_milliseconds += stats.milliseconds;
                }
            }
        if (world.rank() == 0) {
            std::printf("%s\n", weft::train::format_step(stats).c_str());
            std::fflush(stdout);
            // Flushed per step: a run that dies keeps the log of every step it made.
            if (log.is_open()) log << weft::train::format_step_json(stats) << '\n' << std::flush;
        }
        // Every rank of the layout sees the same stats, so they all stop here together; spares
        // hear it from rank 0.
        const bool stop_nonfinite = stop_heard_from_rank_0(!stats.applied() && ++nonfinite_steps > o.skip_nonfinite);
        if (stop_nonfinite)
            throw weft_examples::run_stopped(
                "step " + std::to_string(stats.step) + " is not finite (loss or gradients), first at stage " +
                    std::to_string(stats.nonfinite_stage) + "; it was not applied and nothing is saved (" +
                    std::to_string(nonfinite_steps) + " non-finite step(s), --skip-nonfinite " +
                    std::to_string(o.skip_nonfinite) + "): lower --lr or check the data",
                exit_nonfinite);
        if (val_tokens && o.val_every > 0 && steps_done() % o.val_every == 0) validate();
        if (!o.checkpoint_dir.empty() && o.checkpoint_every > 0 && steps_done() % o.checkpoint_every == 0)
            checkpoint();
        // Every rank learns of a signal any rank got, and all stop after this same step.
        if (const int signal = weft_examples::agreed_stop_signal(host); signal != 0) {
            const bool save = !o.checkpoint_dir.empty();
            if (save && saved_step != steps_done()) checkpoint();
            throw weft_examples::run_stopped(
                std::string("stopped by ") + weft_examples::signal_name(signal) + " after step " +
                    std::to_string(steps_done() - 1) +
                    (save ? "; checkpoint saved: continue with --resume " + o.checkpoint_dir
                          : "; nothing saved (give --checkpoint-dir to save on a stop)"),
                exit_stopped_by_signal);
        }
    }
    if (val_tokens && validated_step != steps_done()) validate();
    report_memory(host, engine);
    if (profiling && profiled_steps > 1) {
        const long long timed = profiled_steps - 1;
        std::printf("kernel profile | GPU time per step of the kernels and GEMMs of rank 0's process, mean over "
                    "%lld step(s) after the first\n",
                    timed);
        for (const std::string& line :
             weft::format_operation_times(profile_totals, timed, profiled_milliseconds / double(timed)))
            std::printf("kernel profile | %s\n", line.c_str());
    }
    if constexpr (requires { engine.backend().memory_high_water(); })
        if (world.rank() == 0 && !engine.is_spare()) {
            // A figure for the log: a failed query must not stop the run's checkpoint and save.
            try {
                const auto high = engine.backend().memory_high_water();
                std::printf("device memory | most held at once on GPU %d (all of its ranks): stream pool %.1f MiB | "
                            "action graphs %.1f MiB\n",
                            engine.backend().device(), double(high.stream_pool_bytes) / 1048576,
                            double(high.graph_bytes) / 1048576);
            } catch (const std::exception& e) {
                std::printf("device memory | unavailable: %s\n", e.what());
            }
        }
    if constexpr (requires { engine.backend().action_graph_launches(); })
        if (o.cuda_graphs && world.rank() == 0 && !engine.is_spare())
            std::printf("cuda graphs | %zu action graph launches on rank 0 (one per F, B, I and W from each "
                        "action's second call)\n",
                        engine.backend().action_graph_launches());
    if (!o.checkpoint_dir.empty() && saved_step != steps_done()) checkpoint();
    if (!o.save.empty() && !engine.is_spare()) {
        weft::train::save(engine, o.save);
        if (world.rank() == 0) std::printf("saved %s\n", o.save.c_str());
    }
}


}  // namespace weft_examples::train_gpt
