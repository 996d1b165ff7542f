// run::settings on a CLI11 command line: one call adds the option groups a program uses, so
// that a flag has one spelling, one help text and one check in every weft program, and
// run::parse makes every option error exit with code 2 (run/exit_codes.hpp), as
// docs/running.md promises. The only header of run/ that needs CLI11 (Debian's libcli11-dev).
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>

#include "weft/exec/cpu_thread_pool.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/run/exit_codes.hpp"
#include "weft/run/settings.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/shard/zero_reduce.hpp"
#include "weft/train/recompute.hpp"

namespace weft::run {

// A finite number above `minimum` (or equal to it when `inclusive`): "inf" and "nan" are
// refused (CLI11's own PositiveNumber prints the whole double range and lets "inf" through).
[[nodiscard]] inline CLI::Validator finite_at_least(double minimum, bool inclusive) {
    char bound[32];
    std::snprintf(bound, sizeof bound, "%g", minimum);
    const std::string expected = std::string("must be a finite number ") + (inclusive ? ">= " : "> ") + bound;
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) ||
                !(inclusive ? value >= minimum : value > minimum))
                return "value " + text + " is invalid: " + expected;
            return {};
        },
        "NUMBER");
}

// An integer in [low, high], worded as the other checks are.
[[nodiscard]] inline CLI::Validator int_in(long long low, long long high) {
    const std::string expected = "must be an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            long long value = 0;
            if (!CLI::detail::lexical_cast(text, value) || value < low || value > high)
                return "value " + text + " is invalid: " + expected;
            return {};
        },
        "INT");
}

// A path that is given must name something: "--checkpoint-dir ''" would otherwise turn the
// feature off without a word.
[[nodiscard]] inline CLI::Validator non_empty_path() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            return text.empty() ? std::string("value \"\" is invalid: must name a path (leave the option out instead)")
                                : std::string();
        },
        "PATH");
}

// A check that `parse(text)` accepts the value: its weft::error's message otherwise, which
// names the option and what is valid (the parsers the run itself uses, so the two agree).
template <class Parse>
[[nodiscard]] auto parsed_by(Parse parse) {
    return [parse](const std::string& text) {
        try {
            static_cast<void>(parse(text));
            return std::string();
        } catch (const error& e) {
            return std::string(e.what());
        }
    };
}

// Makes every integer option of `app` (and of its subcommands) take decimal digits only: CLI11
// reads integers as C's strtoll does with base 0, so "--steps 010" ran 8 steps and "0x3" 3.
// An optional sign (none below zero for an unsigned one), then digits; leading zeros are
// dropped ("010" is 10). run::parse calls it once the options are all added (a transform runs
// before the option's other checks).
inline void integers_in_decimal(CLI::App& app) {
    for (CLI::Option* option : app.get_options()) {
        const std::string type = option->get_type_name();
        const bool is_unsigned = type.rfind("UINT", 0) == 0;
        if (!is_unsigned && type.rfind("INT", 0) != 0) continue;
        option->transform(CLI::Validator(
            [is_unsigned](std::string& text) -> std::string {
                // (An unsigned one would wrap "-1" round to its largest value.)
                if (is_unsigned && !text.empty() && text[0] == '-')
                    return "value " + text + " is invalid: must be a whole number >= 0";
                std::size_t digits = text.empty() || (text[0] != '+' && text[0] != '-') ? 0 : 1;
                const std::size_t sign = digits;
                if (digits == text.size()) return "value " + text + " is invalid: must be a whole number in decimal";
                for (std::size_t i = digits; i < text.size(); ++i)
                    if (text[i] < '0' || text[i] > '9')
                        return "value " + text + " is invalid: must be a whole number in decimal digits";
                while (digits + 1 < text.size() && text[digits] == '0') ++digits;  // keep the last digit
                text.erase(sign, digits - sign);
                return {};
            },
            ""));
    }
    for (CLI::App* sub : app.get_subcommands({})) integers_in_decimal(*sub);
}

// The groups of options a program takes (or them together).
namespace options {
inline constexpr unsigned launch = 1;         // --ranks, --comm-timeout
inline constexpr unsigned layout = 2;         // --schedule, --program, --pp, --dp, --tp, --zero, --chunks, --partition
inline constexpr unsigned switches = 4;       // --switch, --staging-mib
inline constexpr unsigned training = 8;       // --microbatches, --steps, --batch, the optimizer and its lr schedule
inline constexpr unsigned nonfinite = 16;     // --skip-nonfinite
inline constexpr unsigned data = 32;          // --data
inline constexpr unsigned validation = 64;    // --val-data, --val-every, --val-batches
inline constexpr unsigned checkpoints = 128;  // --checkpoint-dir, --checkpoint-every, --keep, --resume, --overwrite
inline constexpr unsigned weights = 256;      // --init-from, --save
inline constexpr unsigned logs = 512;         // --log-json
inline constexpr unsigned mfu = 1024;         // --peak-tflops
inline constexpr unsigned elastic = 2048;    // --elastic, --control, --world-max, --mirror-every, --leave-signal, --join
inline constexpr unsigned all = 4095;
}  // namespace options

namespace detail {

inline CLI::Option* sized(CLI::App& app, const char* name, int& value, const std::string& help, long long most,
                          const char* group, long long least = 1) {
    return app.add_option(name, value, help)->check(int_in(least, most))->capture_default_str()->group(group);
}

inline void add_model_options(CLI::App& app, gpt_sizes& g) {
    // The bounds are gpt_config's (far above any real model, low enough that sizes cannot
    // overflow); checking them here names the option.
    const char* group = "Model (GPT)";
    sized(app, "--layers", g.layers, "transformer blocks", nn::gpt_config::max_layers, group);
    sized(app, "--d-model", g.d_model, "model width", nn::gpt_config::max_width, group);
    sized(app, "--heads", g.heads, "attention heads (must divide --d-model)", nn::gpt_config::max_width, group);
    sized(app, "--vocab", g.vocab, "vocabulary size (256 for make_dataset's byte tokens)", nn::gpt_config::max_vocab,
          group);
    sized(app, "--seq-len", g.seq_len, "tokens per sequence", nn::gpt_config::max_seq_len, group);
}

inline void add_model_options(CLI::App& app, mlp_sizes& m) {
    const char* group = "Model (MLP)";
    sized(app, "--input-dim", m.input_dim, "input features", 1 << 16, group);
    sized(app, "--hidden", m.hidden, "hidden width", 1 << 16, group);
    sized(app, "--blocks", m.blocks, "residual blocks (the model has blocks+2 layers to partition)", 1 << 16, group,
          0);
    sized(app, "--classes", m.classes, "classes of the synthetic task", 1 << 16, group, 2);
}

}  // namespace detail

// Adds the option groups `groups` (run::options::...) over `s`, and the model sizes of each of
// `models` (gpt_sizes, mlp_sizes). The defaults shown are the values `s` holds now, so a
// program sets its own defaults first.
template <class... ModelSizes>
void add_options(CLI::App& app, settings& s, unsigned groups, ModelSizes&... models) {
    (detail::add_model_options(app, models), ...);
    const auto has = [&](unsigned group) { return (groups & group) != 0; };
    const auto ranks_range = int_in(1, 1 << 16);
    if (has(options::layout)) {
        const char* group = "Layout";
        auto* schedule = app.add_option("--schedule", s.schedule, "pipeline schedule: " + sched::schedule_name_list())
                             ->capture_default_str()
                             ->group(group);
        app.add_option("--program", s.program,
                       "run this compute-only program instead of a generated schedule: a CSV file in PyTorch's form "
                       "(torch.distributed.pipelining, or weft-schedule --format csv), one line per pipeline rank; "
                       "it must be for --pp ranks and --microbatches micro-batches, and sets the chunks per rank. "
                       "Its REDUCE_GRAD, UNSHARD and RESHARD cells are checked, then placed by weft itself; not "
                       "with --switch or --elastic (docs/running.md)")
            ->check(non_empty_path())
            ->excludes(schedule)
            ->group(group);
        app.add_option("--pp", s.pp, "pipeline stages")->check(ranks_range)->capture_default_str()->group(group);
        app.add_option("--dp", s.dp, "data-parallel replicas")->check(ranks_range)->capture_default_str()->group(group);
        app.add_option("--tp", s.tp, "tensor-parallel ranks per stage (must divide --heads)")
            ->check(ranks_range)
            ->capture_default_str()
            ->group(group);
        app.add_option("--zero", s.zero,
                       "ZeRO stage: 0 (replicate), 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)")
            ->capture_default_str()
            ->group(group);
        app.add_option("--zero-reduce", s.zero_reduce,
                       "ZeRO-2/3 gradients: step (summed over the micro-batches, reduce-scattered once: least "
                       "traffic) or microbatch (each layer reduced as each micro-batch's backward finishes it, and "
                       "ZeRO-3 parameters gathered layer by layer: least memory; docs/parallelism.md)")
            ->check(parsed_by([](const std::string& text) { return shard::parse_zero_reduce(text, "--zero-reduce"); }))
            ->capture_default_str()
            ->group(group);
        app.add_option("--chunks", s.chunks,
                       "model chunks (stages) per pipeline rank (default: 2 for interleaved, looped-bfs, zbv and "
                       "dualpipev, else 1)")
            ->check(int_in(0, 1 << 10))
            ->group(group);
        app.add_option("--recompute", s.recompute,
                       "activation recompute: none, full (keep each stage's input, run its forward again at the "
                       "backward) or selective (recompute what is large and cheap: attention probabilities), for "
                       "every stage or one per stage, e.g. full,none; the losses are unchanged (docs/engine.md)")
            ->check(parsed_by([](const std::string& text) { return train::parse_recompute(text, "--recompute"); }))
            ->capture_default_str()
            ->group(group);
        app.add_option("--partition", s.partition,
                       "units (layers, with the embedding and head units) per stage, e.g. 2,3 for 3 layers on 2 "
                       "stages (default: balanced by estimated cost per stage)")
            ->delimiter(',')
            ->group(group);
    }
    if (has(options::switches)) {
        const char* group = "Layout switches";
        app.add_option("--switch", s.switches,
                       "switch the layout before step STEP, in memory: STEP:key=value,... with keys pp, dp, tp, zero, "
                       "schedule, chunks, partition (units per stage, e.g. partition=3,5) and world; keys left out "
                       "take the defaults, world keeps its value; world below the ranks launched leaves the others "
                       "as spares (repeatable; docs/elastic.md)")
            ->group(group);
        app.add_option("--staging-mib", s.staging_mib, "the staging cap of a switch's transfers, in MiB")
            ->check(finite_at_least(0, false))
            ->capture_default_str()
            ->group(group);
    }
    if (has(options::launch)) {
        const char* group = "Launch";
        app.add_option("--ranks", s.ranks, "without mpirun: ranks to run as threads (default: the layout's product)")
            ->check(ranks_range)
            ->group(group);
        app.add_option("--threads", s.threads,
                       "threads of a rank's CPU kernels (GEMMs, attention, elementwise, the optimizer); the "
                       "losses are those of 1 thread. 0: the cores this process may use divided by the ranks "
                       "of its machine (a launcher's binding gives a rank its bound cores)")
            ->check(int_in(0, exec::cpu_thread_pool::max_threads))
            ->capture_default_str()
            ->group(group);
        app.add_option("--comm-timeout", s.comm_timeout,
                       "seconds a rank waits for a receive or collective before it reports what it waited for and "
                       "on which rank, and the job ends (exit code 2)")
            ->check(finite_at_least(0, false))
            ->capture_default_str()
            ->group(group);
    }
    if (has(options::training)) {
        const char* group = "Training";
        app.add_option("--microbatches", s.microbatches, "micro-batches per step")
            ->check(int_in(1, 1 << 20))
            ->capture_default_str()
            ->group(group);
        app.add_option("--steps", s.steps, "the step the run ends at: a run resumed at step k trains --steps - k more")
            ->check(int_in(0, 1 << 30))
            ->capture_default_str()
            ->group(group);
        app.add_option("--batch", s.batch,
                       "samples (sequences) per step over every replica: a multiple of the data-parallel degree "
                       "times --microbatches")
            ->check(int_in(1, 1 << 24))
            ->capture_default_str()
            ->group(group);
        app.add_option("--seed", s.seed, "seed of the initial weights (the same draw on the CPU and the GPU)")
            ->capture_default_str()
            ->group(group);
        app.add_option("--optimizer", s.optimizer, "adamw or sgd")->capture_default_str()->group(group);
        app.add_option("--lr", s.lr, "learning rate (the peak, after the warmup)")
            ->check(finite_at_least(0, false))
            ->capture_default_str()
            ->group(group);
        app.add_option("--weight-decay", s.weight_decay, "decoupled weight decay (2-D tensors only)")
            ->check(finite_at_least(0, true))
            ->capture_default_str()
            ->group(group);
        app.add_option("--grad-clip", s.grad_clip,
                       "clip the gradients to this global L2 norm (over every rank, tied weights once), as "
                       "torch.nn.utils.clip_grad_norm_; 0: no clipping (the norm is logged either way)")
            ->check(finite_at_least(0, true))
            ->capture_default_str()
            ->group(group);
        app.add_option("--warmup-steps", s.warmup_steps, "steps of linear warmup to --lr")
            ->check(int_in(0, 1LL << 40))
            ->capture_default_str()
            ->group(group);
        app.add_option("--min-lr", s.min_lr, "learning rate the cosine decay ends at (default: --lr, no decay)")
            ->check(finite_at_least(0, false))
            ->group(group);
        app.add_option("--decay-steps", s.decay_steps, "the step the cosine decay reaches --min-lr (default: --steps)")
            ->check(int_in(0, 1LL << 40))
            ->group(group);
    }
    if (has(options::nonfinite))
        app.add_option("--skip-nonfinite", s.skip_nonfinite,
                       "non-finite steps (NaN or infinite loss or gradients) to skip, not applied, before the run "
                       "stops with exit code 3 (0: the first one stops it)")
            ->check(int_in(0, 1 << 30))
            ->capture_default_str()
            ->group("Training");
    if (has(options::data))
        app.add_option("--data", s.data, "llm.c token file (.bin; make one with make_dataset)")
            ->check(non_empty_path())
            ->group("Data");
    if (has(options::validation)) {
        const char* group = "Data";
        auto* val_data = app.add_option("--val-data", s.val_data,
                                        "llm.c token file for a validation loss (forwards only), at the end of the "
                                        "run and every --val-every steps")
                             ->check(non_empty_path())
                             ->group(group);
        app.add_option("--val-every", s.val_every, "steps between validation losses (0: at the end only)")
            ->check(int_in(0, 1LL << 40))
            ->capture_default_str()
            ->needs(val_data)
            ->group(group);
        app.add_option("--val-batches", s.val_batches, "batches of --batch sequences per validation loss")
            ->check(int_in(1, 1 << 20))
            ->capture_default_str()
            ->needs(val_data)
            ->group(group);
    }
    if (has(options::checkpoints)) {
        const char* group = "Checkpoints";
        auto* checkpoint_dir =
            app.add_option("--checkpoint-dir", s.checkpoint_dir,
                           "save checkpoints here as step-<n>/ directories (weights, optimizer state, manifest) with "
                           "a `latest` pointer, at the end and when stopped by SIGTERM or SIGINT; a fresh run refuses "
                           "a root that holds checkpoints (docs/checkpoints.md)")
                ->check(non_empty_path())
                ->group(group);
        app.add_option("--checkpoint-every", s.checkpoint_every, "also save a checkpoint every N steps")
            ->check(int_in(1, 1LL << 40))
            ->needs(checkpoint_dir)
            ->group(group);
        app.add_option("--keep", s.keep, "keep the newest K checkpoints (0: all)")
            ->check(int_in(0, 1 << 30))
            ->capture_default_str()
            ->needs(checkpoint_dir)
            ->group(group);
        app.add_option("--resume", s.resume,
                       "continue a run from a checkpoint directory, or from the newest one of a --checkpoint-dir: "
                       "weights, optimizer, step and data position, checked against its manifest")
            ->check(non_empty_path())
            ->group(group);
        app.add_flag("--overwrite", s.overwrite,
                     "a fresh run (no --resume) replaces the checkpoints already in --checkpoint-dir, at its first "
                     "save")
            ->needs(checkpoint_dir)
            ->group(group);
    }
    if (has(options::weights)) {
        const char* group = "Checkpoints";
        app.add_option("--init-from", s.init_from,
                       "safetensors checkpoint to start from (and its .optimizer companion); a weft checkpoint also "
                       "restores the step and data position, so training continues where it was saved")
            ->check(non_empty_path())
            ->group(group);
        app.add_option("--save", s.save, "write a safetensors checkpoint (and the optimizer companion) at the end")
            ->check(non_empty_path())
            ->group(group);
    }
    if (has(options::logs)) {
        const char* group = "Logs";
        app.add_option("--log-json", s.log_json, "write one JSON object per step: step, loss, ms, tokens_per_s, bubble")
            ->check(non_empty_path())
            ->group(group);
    }
    if (has(options::mfu)) {
        app.add_option("--peak-tflops", s.peak_tflops,
                       "peak TFLOP/s for MFU (0: the program's default: a measured CPU GEMM rate times the cores, or "
                       "the GPU's dense bf16 peak from weft's table)")
            ->check(finite_at_least(0, true))
            ->capture_default_str()
            ->group("Logs");
    }
    if (has(options::elastic)) {
        const char* group = "Elastic";
        auto* elastic =
            app.add_flag("--elastic", s.elastic,
                         "ranks may leave with notice, crash or join while the run trains (under mpirun only): the "
                         "state moves to the ranks that remain, at a step boundary (docs/elastic.md)")
                ->group(group);
        app.add_option("--control", s.control_file,
                       "a file of commands appended while the run trains: `leave RANKS` (e.g. 1,3-4) or `grow N`; "
                       "the lines already in it at the start are checked, not applied; created empty when missing "
                       "(docs/running.md)")
            ->check(non_empty_path())
            ->needs(elastic)
            ->group(group);
        app.add_option("--world-max", s.world_max, "the most ranks `grow` may reach (default: the ranks launched)")
            ->check(int_in(1, 1 << 16))
            ->needs(elastic)
            ->group(group);
        app.add_option("--mirror-every", s.mirror_every,
                       "steps between mirrors of each rank's unique state on a buddy rank, what a crash is recovered "
                       "from without a checkpoint")
            ->check(int_in(1, 1 << 30))
            ->capture_default_str()
            ->needs(elastic)
            ->group(group);
        app.add_option("--join", s.join_control,
                       "join a running elastic job instead of starting a run: FILE is that job's --control file; "
                       "give the job's own options (launch with mpirun -np N, N the processes that join; "
                       "docs/elastic.md)")
            ->check(non_empty_path())
            ->needs(elastic)
            ->group(group);
        app.add_option("--leave-signal", s.leave_signal,
                       "the signal that tells a rank to leave: USR1, USR2 or none (a signal to every rank stops the "
                       "run with a checkpoint, exit code 4, as SIGTERM does)")
            ->check(CLI::IsMember({"USR1", "USR2", "none"}))
            ->capture_default_str()
            ->group(group);
    }
}

// Parses the command line. Returns the exit code to end the program with: 0 after --help,
// run::exit_code::failed (2) for any option error, with CLI11's message (CLI11's own codes,
// 105 to 114, would say nothing the table of exit codes promises); nullopt to go on.
[[nodiscard]] inline std::optional<int> parse(CLI::App& app, int argc, const char* const* argv) {
    integers_in_decimal(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? exit_code::done : exit_code::failed;
    }
    return std::nullopt;
}

}  // namespace weft::run
