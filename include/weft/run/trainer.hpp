// run::trainer: the training loop every weft program needs, generic over the engine (GPT or
// an MLP, CPU or CUDA, any communicator), with its policies as values (run::settings) or
// hooks: the lr schedule, gradient clipping, the non-finite policy, validation and
// checkpoint cadence, retention and resume, a plan of layout switches, the step log and JSON
// log, the preemption agreement and the memory report. Spare ranks are handled inside it.
// Every input is checked before the first step, and an error from the data once training has
// begun still leaves the newest state saved where a checkpoint root is configured.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/comm/host_side.hpp"
#include "weft/comm/peer_lost.hpp"
#include "weft/core/error.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/exec/operation_times.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/io/checkpoint_root.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/run/checkpoint_root_guard.hpp"
#include "weft/run/elastic_control.hpp"
#include "weft/run/elastic_event.hpp"
#include "weft/run/elastic_layout.hpp"
#include "weft/run/held_step_lines.hpp"
#include "weft/run/exit_codes.hpp"
#include "weft/run/join_handshake.hpp"
#include "weft/run/join_terms.hpp"
#include "weft/run/kernel_threads.hpp"
#include "weft/run/layout.hpp"
#include "weft/run/memory_report.hpp"
#include "weft/run/preemption.hpp"
#include "weft/run/program_file.hpp"
#include "weft/run/settings.hpp"
#include "weft/run/switch_plan.hpp"
#include "weft/sched/csv.hpp"
#include "weft/sched/program.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/checkpoint_directory.hpp"
#include "weft/train/engine_options.hpp"
#include "weft/train/lr_schedule.hpp"
#include "weft/train/mfu.hpp"
#include "weft/train/step_log.hpp"
#if WEFT_HAS_MPI
#include "weft/run/elastic_session.hpp"
#endif

namespace weft::run {

namespace detail {

// --elastic's part of the loop (run/elastic_session.hpp) where the world is MPI's; elsewhere
// nothing (check_elastic_settings refuses --elastic there before anything trains).
template <class Engine, class World>
struct elastic_hooks {
    elastic_hooks(const settings&, World&, std::function<parallel_config(int, const parallel_config&)>,
                  const join_terms&) {}
    [[nodiscard]] static constexpr bool active() { return false; }
};
#if WEFT_HAS_MPI
template <class Engine>
struct elastic_hooks<Engine, comm::mpi> {
    elastic_hooks(const settings& s, comm::mpi& world, std::function<parallel_config(int, const parallel_config&)> choose,
                  const join_terms& terms) {
        if (s.elastic) session.emplace(s, world, std::move(choose), terms);
    }
    [[nodiscard]] bool active() const { return session.has_value(); }
    std::optional<elastic_session<Engine>> session;
};
#endif

}  // namespace detail

template <class Engine>
class trainer {
public:
    using batch_type = typename Engine::batch_type;
    using model_config = typename Engine::model_config;
    using world_type = std::remove_reference_t<decltype(std::declval<Engine&>().world())>;
    using backend_type = std::remove_reference_t<decltype(std::declval<Engine&>().backend())>;
    // The batch at a data position counted in batches: a resumed run goes on from where it
    // was saved. A pure function of its argument on every rank (the ranks of a pipeline and
    // of a tensor-parallel group read the same batch).
    using batch_source = std::function<batch_type(std::uint64_t)>;

    trainer(world_type& world, const settings& s, const model_config& model)
        : world_(&world), s_(s), model_(model) {}

    // The validation loss: the mean loss of batches 0..val_batches-1 of `batch`, forwards only,
    // every val_every steps and at the end; the same batches every time so that values compare.
    trainer& validation(std::function<batch_type(int)> batch) {
        validation_batch_ = std::move(batch);
        return *this;
    }
    // Tokens a sample holds (the step log shows tok/s when > 1) and the model's FLOPs per
    // token for MFU, against settings.peak_tflops or, when that is 0, default_peak() (called
    // once the engine exists; it may measure).
    trainer& throughput(double tokens_per_sample, double flops_per_token = 0,
                        std::function<double()> default_peak = {}) {
        tokens_per_sample_ = tokens_per_sample;
        flops_per_token_ = flops_per_token;
        default_peak_ = std::move(default_peak);
        return *this;
    }
    // The program's settings that a checkpoint's manifest keeps beside the run's own.
    trainer& manifest(nlohmann::json run) {
        manifest_extra_ = std::move(run);
        return *this;
    }
    // Called on every rank once the engine exists and any checkpoint is loaded (a header line),
    // and once training ends, before the final save (device reports).
    trainer& on_start(std::function<void(Engine&)> hook) {
        on_start_ = std::move(hook);
        return *this;
    }
    trainer& on_finish(std::function<void(Engine&)> hook) {
        on_finish_ = std::move(hook);
        return *this;
    }
    // --elastic: the layout to go on in after an event, over `ranks` ranks (default:
    // run/elastic_layout.hpp's choice by the planner).
    trainer& elastic_layout(std::function<parallel_config(int ranks, const parallel_config& current)> choose) {
        choose_layout_ = std::move(choose);
        return *this;
    }

    // Collective over the world: checks every input, makes the engine on make_backend()'s
    // backend (after the checks, so bad input is reported before a missing GPU), and trains to
    // settings.steps. Throws run::stopped for the ends every rank agreed on.
    template <class MakeBackend>
    void run(batch_source batch, MakeBackend&& make_backend) {
        world_->set_timeout(std::chrono::duration<double>(s_.comm_timeout));  // the engine's groups inherit it
        kernel_threads_ = kernel_threads(s_.threads, *world_);
        check_inputs(batch);
        const train::engine_options options{
            .batch_size = s_.batch,
            .optimizer = {.kind = optim::parse_optimizer_kind(s_.optimizer), .lr = s_.lr,
                          .weight_decay = s_.weight_decay},
            .zero_reduce = shard::parse_zero_reduce(s_.zero_reduce, "--zero-reduce"),
            .partition = s_.partition,
            .recompute = train::parse_recompute(s_.recompute, "--recompute"),
            .grad_clip = s_.grad_clip};
#if WEFT_HAS_MPI
        if constexpr (std::is_same_v<world_type, comm::mpi>)
            if (joined_running_world()) {  // started by a running elastic job's grow
                join(batch, options, with_kernel_threads(make_backend()));
                return;
            }
#endif
        if (program_) {  // --program: the file's schedule, in the layout --pp, --dp, --tp, --zero give
            // Its stage-wide cells were checked; the engine places its own (lower, add_shard_actions).
            Engine engine(*world_, program_config(s_, *program_, world_->size()), model_, options,
                          sched::compute_part(*program_), with_kernel_threads(make_backend()));
            train(engine, batch);
            return;
        }
        const layout start{.pp = s_.pp, .dp = s_.dp, .tp = s_.tp, .zero = s_.zero, .chunks = s_.chunks,
                           .schedule = s_.schedule, .partition = s_.partition};
        const parallel_config config = start.config(s_.microbatches, world_->size());
        switches_ = plan_switches<Engine>(s_.switches, s_.steps, s_.microbatches, world_->size(), model_, options,
                                          s_.staging_mib);
        Engine engine(*world_, config, model_, options, with_kernel_threads(make_backend()));
        train(engine, batch);
    }
    void run(batch_source batch) {
        run(std::move(batch), [] { return backend_type{}; });
    }

private:
    // A CPU backend runs its kernels on --threads threads; other backends ignore it.
    template <class Backend>
    Backend with_kernel_threads(Backend backend) const {
        if constexpr (requires { backend.set_threads(1); }) backend.set_threads(kernel_threads_);
        return backend;
    }

#if WEFT_HAS_MPI
    // A process a grow started: once ready, it learns the step and the layouts from rank 0 (or
    // that the run ended before taking it in: it leaves, exit 0), builds its engine holding
    // nothing in the running layout, takes its part of the state in the move every rank makes
    // now (the old ranks' grow), and trains on with them.
    void join(const batch_source& batch, const train::engine_options& options, backend_type backend) {
        // Its inputs are checked: it votes on the run's terms (a job launched with --join was
        // given its options by a person), and the old ranks may take it in.
        hold_joiner_if_told();
        const join_terms mine = make_join_terms(s_, model_);
        join_terms theirs;
        std::string difference;
        const bool taken = join_vote(world_->native(), theirs, [&](const join_terms& run) {
            difference = run.difference(mine);
            return difference.empty();
        });
        if (!taken) {
            int own_rank = 0;  // this job's rank 0 speaks for it
            MPI_Comm_rank(MPI_COMM_WORLD, &own_rank);
            const std::string why = difference.empty()
                                        ? std::string("the running job refused these processes (its output says why)")
                                        : "this process's " + difference + " differs: join with the run's own options";
            if (own_rank == 0) std::fprintf(stderr, "weft: joining the running job: %s\n", why.c_str());
            throw stopped("not taken in by the running job", exit_code::failed);
        }
        // The layout the run goes on in (in its default partition, as a grow's), its
        // communicators and the move's plan, made with the old ranks while they train
        // (run/joiner_start.hpp), and this process's state buffers, put in memory now rather
        // than page by page during the move.
        const join_handshake announced = receive_start_layouts(*world_);
        const parallel_config chosen = announced.next.config();
        train::engine_options grown = options;
        grown.partition = {};
        train::engine_options announced_running = options;
        announced_running.partition = announced.running_partition();
        const elastic::layout moving_from =
            Engine::layout_type::layout_of(announced.running.config(), model_, announced_running);
        auto prepared = Engine::prepare_layout(*world_, chosen, model_, grown,
                                               {.reserve_in = &backend.state_memory(), .moving_from = &moving_from});
        end_of_start(world_->native());
        const join_handshake told = receive_join_handshake(*world_);
        // Ends like the old ranks, through MPI_Finalize: Open MPI counts a spawned process
        // that exits without it as failed.
        if (told.step == join_handshake::run_ended) return;
        require(told.next == layout_fields::of(chosen), "layout at the join", "the handshake's",
                "must be the one the running job announced during the start");
        train::engine_options running = options;
        running.partition = told.running_partition();
        Engine engine(*world_, told.running.config(), model_, running, train::joining, std::move(backend));
        static_cast<void>(engine.move_to_grown_world(
            *world_, chosen, {.partition = {}, .staging_bytes = static_cast<std::size_t>(s_.staging_mib * 1048576.0)},
            std::move(prepared)));
        joined_at_ = told.step;
        train(engine, batch);
    }
#endif

    // Everything a run reads, before anything trains: the validation batches, the first
    // batch, the files it will write, and the checkpoint root.
    void check_inputs(const batch_source& batch) {
#if WEFT_HAS_MPI
        constexpr bool on_mpi = std::is_same_v<world_type, comm::mpi>;
#else
        constexpr bool on_mpi = false;
#endif
        check_program_settings(s_);  // before --elastic's own checks: the conflict is the clearer message
        const std::string elastic_notice = check_elastic_settings(s_, on_mpi, comm::has_ulfm(), world_->size());
        if (s_.elastic) {
            require(s_.switches.empty(), "--switch", s_.switches.front(),
                    "cannot be combined with --elastic: an elastic run chooses its layouts as ranks come and go");
            if (!s_.control_file.empty()) static_cast<void>(control_file(s_.control_file));  // every line parses
        }
        if (!elastic_notice.empty() && world_->rank() == 0) std::printf("%s\n", elastic_notice.c_str());
        // --program: read and checked against --pp, --microbatches, --chunks and the model on
        // every rank (each builds its engine from it).
        if (!s_.program.empty()) program_ = read_run_program(s_, Engine::model_type::num_units(model_));
        // A mode per stage fits one layout's stages: a switch would change them mid-run.
        const auto recompute = train::parse_recompute(s_.recompute, "--recompute");
        require(recompute.size() <= 1 || (s_.switches.empty() && !s_.elastic), "--recompute", s_.recompute,
                "one mode per stage cannot be combined with --switch or --elastic, which change the stages; "
                "give one mode for every stage (none, full or selective)");
        // Per micro-batch is a ZeRO-2/3 mode; a run that switches layouts may reach those stages.
        require(shard::parse_zero_reduce(s_.zero_reduce, "--zero-reduce") == shard::zero_reduce::step ||
                    s_.zero >= 2 || !s_.switches.empty() || s_.elastic,
                "--zero-reduce", s_.zero_reduce,
                "needs --zero 2 or 3 (ZeRO-0 and ZeRO-1 keep whole gradients and reduce once per step); --zero is " +
                    std::to_string(s_.zero));
        require(s_.resume.empty() || s_.init_from.empty(), "--resume", s_.resume,
                "cannot be combined with --init-from: --resume continues a run from its checkpoint directory, "
                "--init-from starts one from weights");
        if (validation_batch_) {
            try {
                for (int b = 0; b < s_.val_batches; ++b) static_cast<void>(validation_batch_(b));
            } catch (const error& e) {
                throw error("--val-data cannot give " + std::to_string(s_.val_batches) +
                            " validation batch(es) (--val-batches): " + unprefixed(e));
            }
        }
        try {
            static_cast<void>(batch(0));
        } catch (const error& e) {
            throw error("--data cannot give one batch: " + unprefixed(e));
        }
        if (world_->rank() == 0) {
            if (!s_.checkpoint_dir.empty()) {
                require_fresh_checkpoint_root(s_.checkpoint_dir, !s_.resume.empty(), s_.overwrite);
                io::prepare_checkpoint_root(s_.checkpoint_dir, "--checkpoint-dir");
            }
            // Before training, not after it: a missing or read-only directory, or a device or
            // a link at the path, must not cost the trained model.
            if (!s_.save.empty())
                for (const auto& file : {std::filesystem::path(s_.save), train::optimizer_companion(s_.save)}) {
                    io::require_writable(file, "--save");
                    io::remove_stale_temporaries(file);
                }
            if (!s_.log_json.empty()) {
                log_.open(s_.log_json);
                require(log_.good(), "--log-json", s_.log_json, "must be a writable file path");
            }
        }
        lr_ = {.lr = s_.lr, .min_lr = s_.final_lr(), .warmup_steps = s_.warmup_steps, .decay_steps = s_.decay_end()};
        lr_.validate();
    }

    nlohmann::json run_settings() const {
        nlohmann::json run{{"data", s_.data}, {"batch", s_.batch}, {"steps", s_.steps}, {"lr", s_.lr},
                           {"min_lr", s_.final_lr()}, {"warmup_steps", s_.warmup_steps},
                           {"decay_steps", s_.decay_end()}, {"optimizer", s_.optimizer},
                           {"weight_decay", s_.weight_decay}, {"grad_clip", s_.grad_clip}, {"seed", s_.seed},
                           {"recompute", s_.recompute}, {"zero_reduce", s_.zero_reduce}};
        if (!s_.program.empty()) run["program_file"] = s_.program;  // "program" names the executable
        run.update(manifest_extra_);
        return run;
    }

    void train(Engine& engine, const batch_source& batch) {
        // The run's own votes and reports are host values, over the engine's world: an elastic
        // run's changes with its events.
        const auto host = [&]() -> auto& { return comm::host_side(engine.world()); };
        const auto run_started = std::chrono::steady_clock::now();  // the steps' "ended_s"
        int rank = world_->rank();
        detail::elastic_hooks<Engine, world_type> elastic(
            s_, *world_,
            choose_layout_ ? choose_layout_ : [&engine](int ranks, const parallel_config& current) {
                return choose_elastic_layout<Engine>(ranks, current, engine.model(), engine.options());
            },
            make_join_terms(s_, model_));
        // What a checkpoint brings in lives where the engine's state does (a GPU's memory).
        const state_memory_scope state_memory(engine.backend().state_memory());
        if (!s_.init_from.empty() && joined_at_ < 0) train::load(engine, s_.init_from);
        if (!s_.resume.empty() && joined_at_ < 0) {
            const auto manifest = train::load_checkpoint_directory(engine, s_.resume, "--resume");
            if (rank == 0)
                std::printf("resumed at step %llu from %s (saved as pp %d | dp %d | tp %d | zero %d | %s)\n",
                            static_cast<unsigned long long>(manifest.step), s_.resume.c_str(), manifest.layout.pp,
                            manifest.layout.dp, manifest.layout.tp, manifest.layout.zero,
                            manifest.layout.schedule.c_str());
        }
        const double peak_tflops =
            flops_per_token_ <= 0 ? 0 : s_.peak_tflops > 0 ? s_.peak_tflops : default_peak_ ? default_peak_() : 0;
        if (on_start_) on_start_(engine);
        // Steps taken: every rank counts them, spares too, so that all of them reach each switch.
        long long steps_done =
            joined_at_ >= 0 ? joined_at_ : static_cast<long long>(engine.progress().step);
        if (rank == 0 && steps_done >= s_.steps)
            std::printf("already at step %lld, the --steps %lld this run ends at: nothing to train\n", steps_done,
                        s_.steps);
        long long saved_step = -1;
        bool replaced_old = !s_.overwrite;
        const auto checkpoint = [&] {
            if (engine.is_spare()) {  // the layout's ranks save it
                saved_step = steps_done;
                return;
            }
            if (!replaced_old && rank == 0) remove_checkpoints(s_.checkpoint_dir);
            replaced_old = true;
            const auto saved = train::save_checkpoint_directory(engine, s_.checkpoint_dir, run_settings(), s_.keep);
            saved_step = steps_done;
            if (rank == 0) {
                std::printf("saved checkpoint %s\n", saved.directory.c_str());
                std::fflush(stdout);
            }
        };
        // An input that fails once training has begun (every rank reads the same data, so every
        // rank fails alike) still leaves the newest state saved.
        const auto saving_on_input_error = [&](auto&& read) -> decltype(read()) {
            try {
                return read();
            } catch (const error& e) {
                if (s_.checkpoint_dir.empty() || saved_step == steps_done) throw;
                checkpoint();
                throw error(unprefixed(e) + " (the state after step " + std::to_string(steps_done) +
                            " is saved: continue with --resume " + s_.checkpoint_dir + ")");
            }
        };
        long long validated_step = -1;
        const auto validate = [&] {
            validated_step = steps_done;
            if (engine.is_spare()) return;
            double sum = 0;
            for (int b = 0; b < s_.val_batches; ++b)
                sum += engine.evaluate(saving_on_input_error([&] { return validation_batch_(b); }));
            const double val_loss = sum / s_.val_batches;
            if (rank != 0) return;
            std::printf("val loss %.4f | after %lld steps | %d batches\n", val_loss, steps_done, s_.val_batches);
            std::fflush(stdout);
            if (log_.is_open())
                log_ << "{\"step\": " << steps_done << ", \"val_loss\": " << train::json_number(val_loss) << "}\n"
                     << std::flush;
        };
        // Switches before the step a resumed run starts at happened in the run it resumes.
        std::size_t next_switch = 0;
        while (next_switch < switches_.size() && switches_[next_switch].step < steps_done) ++next_switch;
        if (rank == 0 && next_switch > 0)
            std::printf("resumed past %zu --switch(es): training goes on in the layout given by --pp, --dp, --tp, "
                        "--zero\n",
                        next_switch);
        const auto staging_bytes = static_cast<std::size_t>(s_.staging_mib * 1048576.0);
        const auto apply_switch = [&](const planned_switch& sw) {
            const auto report = engine.reconfigure(sw.config, {.partition = sw.partition, .staging_bytes = staging_bytes});
            if (rank != 0) return;
            std::printf("switch | before step %lld | %s\n", sw.step, report.summary().c_str());
            std::fflush(stdout);
            if (log_.is_open())
                log_ << nlohmann::ordered_json{{"event", "switch"},
                                               {"step", sw.step},
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
            if (engine.config().world_size() == engine.world().size()) return stop;
            int flag[1] = {stop ? 1 : 0};
            host().broadcast(std::as_writable_bytes(std::span<int>(flag)), 0);
            return flag[0] != 0;
        };
        // A backend that times its operations (exec::cuda) shows them per step at the end, from
        // the run's second step on: the first is warm-up (allocations, cuBLASLt's choices).
        constexpr bool can_profile = requires { engine.backend().take_operation_times(); };
        const bool profiling = can_profile && s_.kernel_profile && rank == 0 && !engine.is_spare();
        std::vector<operation_time> profile_totals;
        long long profiled_steps = 0;  // the warm-up step included
        double profiled_milliseconds = 0;
        if constexpr (can_profile)
            if (profiling) engine.backend().enable_operation_profile(true);
        const double tokens_per_step = static_cast<double>(s_.batch) * tokens_per_sample_;
        int nonfinite_steps = 0;
        // A stop every rank agreed on (a signal): after this step, with a checkpoint where a
        // root is configured.
        const auto stop_by = [&](const std::string& why) {
            const bool save = !s_.checkpoint_dir.empty();
            if (save && saved_step != steps_done) checkpoint();
            throw stopped("stopped by " + why + " after step " + std::to_string(steps_done - 1) +
                              (save ? "; checkpoint saved: continue with --resume " + s_.checkpoint_dir
                                    : "; nothing saved (give --checkpoint-dir to save on a stop)"),
                          exit_code::stopped_by_signal);
        };
        // Each step's line and JSON object, from rank 0; under --elastic with ULFM held until the
        // mirror commits a later boundary (a failure would train the steps after it again).
        held_step_lines step_reports(elastic.active() && comm::has_ulfm(), [this](const step_lines& lines) {
            std::printf("%s\n", lines.text.c_str());
            std::fflush(stdout);
            // Flushed per step: a run that dies keeps the log of every step it made.
            if (log_.is_open()) log_ << lines.json << '\n' << std::flush;
        });
        // An elastic event's line and JSON object, from the new world's rank 0.
        [[maybe_unused]] const auto after_event = [&](const elastic_event& event) {
            rank = engine.world().rank();
            if (rank != 0) return;
            // The launch's rank 0 may have left or failed: the new rank 0 logs from here on.
            if (!log_.is_open() && !s_.log_json.empty()) log_.open(s_.log_json, std::ios::app);
            std::printf("%s\n", format_elastic_event(event).c_str());
            std::fflush(stdout);
            if (log_.is_open()) log_ << elastic_event_json(event).dump() << '\n' << std::flush;
        };
        while (steps_done < s_.steps) {
            try {
            while (next_switch < switches_.size() && switches_[next_switch].step == steps_done)
                apply_switch(switches_[next_switch++]);
#if WEFT_HAS_MPI
            if constexpr (std::is_same_v<world_type, comm::mpi>)
                if (elastic.active()) {
                    const boundary_outcome outcome = elastic.session->at_boundary(engine, steps_done);
                    if (const auto committed = elastic.session->committed_boundary())
                        step_reports.release_before(*committed);
                    elastic.session->crash_if_told(steps_done);
                    if (outcome.everyone_leaves) stop_by("the leave signal on every rank");
                    for (const elastic_event& event : outcome.events) after_event(event);
                }
#endif
            // A spare only keeps count, and follows rank 0's stops.
            if (engine.is_spare()) {
                ++steps_done;
                if (stop_heard_from_rank_0(false)) throw stopped("the run stopped on rank 0", exit_code::nonfinite);
                if (agreed_stop_signal(host()) != 0) throw stopped("stopped by a signal", exit_code::stopped_by_signal);
                continue;
            }
            const double step_lr = lr_.at(steps_done);
            engine.set_learning_rate(step_lr);
            const auto position = engine.progress().samples / static_cast<std::uint64_t>(s_.batch);
            // What ran since the last step (validation, a checkpoint, a switch) is not the step's.
            if constexpr (can_profile)
                if (profiling) static_cast<void>(engine.backend().take_operation_times());
            auto stats = engine.step(saving_on_input_error([&] { return batch(position); }));
            ++steps_done;
            stats.lr = step_lr;
            stats.ended_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_started).count();
            if (tokens_per_sample_ > 1) stats.tokens_per_second = tokens_per_step / (stats.milliseconds / 1e3);
            if (flops_per_token_ > 0)
                stats.mfu = train::mfu(flops_per_token_, tokens_per_step, stats.milliseconds / 1e3, peak_tflops);
            if constexpr (can_profile)
                if (profiling) {
                    const auto times = engine.backend().take_operation_times();
                    if (++profiled_steps > 1) {  // the first is warm-up
                        accumulate_operation_times(profile_totals, times);
                        profiled_milliseconds += stats.milliseconds;
                    }
                }
            if (rank == 0)
                step_reports.add({stats.step, train::format_step(stats), train::format_step_json(stats)});
            // Every rank of the layout sees the same stats, so they all stop here together;
            // spares hear it from rank 0.
            if (stop_heard_from_rank_0(!stats.applied() && ++nonfinite_steps > s_.skip_nonfinite))
                throw stopped("step " + std::to_string(stats.step) +
                                  " is not finite (loss or gradients), first at stage " +
                                  std::to_string(stats.nonfinite_stage) + "; it was not applied and nothing is saved (" +
                                  std::to_string(nonfinite_steps) + " non-finite step(s), --skip-nonfinite " +
                                  std::to_string(s_.skip_nonfinite) + "): lower --lr or check the data",
                              exit_code::nonfinite);
            if (validation_batch_ && s_.val_every > 0 && steps_done % s_.val_every == 0) validate();
            if (!s_.checkpoint_dir.empty() && s_.checkpoint_every > 0 && steps_done % s_.checkpoint_every == 0)
                checkpoint();
            // Every rank learns of a signal any rank got, and all stop after this same step.
            if (const int signal = agreed_stop_signal(host()); signal != 0) stop_by(signal_name(signal));
            } catch (const comm::peer_lost& lost) {
                // A rank failed or stalled (ULFM): every survivor is here. They go on from the
                // last mirrored boundary in a layout over themselves, or end the run (exit 2).
#if WEFT_HAS_MPI
                if constexpr (std::is_same_v<world_type, comm::mpi>) {
                    if (!elastic.active()) throw;  // not elastic: the launch ends the job
                    elastic_event event;
                    const bool voted = dynamic_cast<const comm::peer_lost_in_agreement*>(&lost) != nullptr;
                    steps_done = elastic.session->recover(engine, event, voted);
                    step_reports.drop_from(steps_done);
                    after_event(event);
                } else {
                    throw;
                }
#else
                throw;
#endif
            }
        }
        step_reports.release_all();  // every step trained counts
        if (validation_batch_ && validated_step != steps_done) validate();
        report_memory(host(), engine);
        if (profiling && profiled_steps > 1) {
            const long long timed = profiled_steps - 1;
            std::printf("kernel profile | GPU time per step of the kernels and GEMMs of rank 0's process, mean over "
                        "%lld step(s) after the first\n",
                        timed);
            for (const std::string& line :
                 format_operation_times(profile_totals, timed, profiled_milliseconds / double(timed)))
                std::printf("kernel profile | %s\n", line.c_str());
        }
        if (on_finish_) on_finish_(engine);
        if (!s_.checkpoint_dir.empty() && saved_step != steps_done) checkpoint();
        if (!s_.save.empty() && !engine.is_spare()) {
            train::save(engine, s_.save);
            if (rank == 0) std::printf("saved %s\n", s_.save.c_str());
        }
    }

    world_type* world_;
    int kernel_threads_ = 1;  // --threads, resolved
    settings s_;
    model_config model_;
    std::function<batch_type(int)> validation_batch_;
    double tokens_per_sample_ = 1;
    double flops_per_token_ = 0;
    std::function<double()> default_peak_;
    nlohmann::json manifest_extra_ = nlohmann::json::object();
    std::function<void(Engine&)> on_start_;
    std::function<void(Engine&)> on_finish_;
    std::function<parallel_config(int, const parallel_config&)> choose_layout_;
    std::vector<planned_switch> switches_;
    std::optional<sched::program> program_;  // --program, as read (stage-wide cells kept)
    long long joined_at_ = -1;  // a process a grow started: the step it joined at
    train::lr_schedule lr_{};
    std::ofstream log_;
};

}  // namespace weft::run
