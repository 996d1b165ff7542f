// run::swarm_trainer: a training run over a SWARM pipeline (weft::swarm::net::trainer, over
// ZeroMQ), driven by run::settings and the swarm's own options, as run::trainer is for the
// engines: it checks the data and the fault plan before the first step, starts the workers
// (--spawn), runs the steps with their joins, prints the step line and writes the JSON log,
// stops and reaps the workers, and prints the members. run_swarm_worker is a worker's side.
#pragma once

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/checkpoint_root.hpp"
#include "weft/data/token_batches.hpp"
#include "weft/io/token_file.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/run/checkpoint_root_guard.hpp"
#include "weft/run/child_processes.hpp"
#include "weft/run/exit_codes.hpp"
#include "weft/run/settings.hpp"
#include "weft/swarm/checkpoint.hpp"
#include "weft/swarm/fault_flags.hpp"
#include "weft/swarm/net/trainer.hpp"
#include "weft/swarm/net/worker.hpp"
#include "weft/train/lr_schedule.hpp"

namespace weft::run {

// The swarm's own options beside run::settings (docs/swarm.md names their flags).
struct swarm_settings {
    int stages = 2;
    int workers_per_stage = 2;       // workers each stage needs before training starts
    bool spawn = false;              // start the workers as child processes on this machine
    bool join_through_peer = false;  // a --join worker says hello to a live worker, not to the trainer
    std::string listen = "127.0.0.1:0";
    std::vector<std::string> fails, stalls, slows, joins;  // words of swarm/fault_flags.hpp
    std::size_t compress_block = 0;                        // 0: activations travel plain
    double heartbeat_s = 0.25;
    double rebalance_s = 0;  // 0: workers never move between stages
    int catch_up_steps = 4;
    int in_flight = 0;  // 0: all of a step's micro-batches
    std::size_t state_chunk = 1 << 16;
    int max_attempts = 8;
    double wait_s = 30;
};

// A worker's side: where it says hello and what it asks for.
struct swarm_worker_settings {
    std::string rendezvous;          // the trainer's HOST:PORT
    std::string host = "127.0.0.1";  // the address other workers reach this one at
    long long id = -1;               // -1: the trainer numbers it
    int stage = -1;                  // -1: where the trainer wants
    long long parent_pid = 0;        // > 0: the worker exits with this process (a spawned worker)
    double connect_timeout_s = 10;
    double fetch_timeout_s = 5;  // a peer that hands out no state chunk within this is passed over
};

// Worker processes --spawn starts on this one machine at most.
inline constexpr long long max_spawned_workers = 1024;

// A worker's command line in swarm_train's flags, which a SWARM program's worker takes.
[[nodiscard]] inline std::vector<std::string> swarm_worker_arguments(const swarm_worker_settings& w) {
    return {"--role",       "worker",
            "--rendezvous", w.rendezvous,
            "--id",         std::to_string(w.id),
            "--host",       w.host,
            "--parent-pid", std::to_string(w.parent_pid),
            "--stage",      std::to_string(w.stage)};
}

// The program a swarm_trainer runs in: its name in the banner and in the hint for starting
// workers by hand (`NAME --role worker --rendezvous HOST:PORT`, swarm_train's worker flags),
// and how it starts a worker of itself (--spawn).
struct swarm_program {
    std::string name = "swarm_train";
    std::string executable = "/proc/self/exe";
    std::function<std::vector<std::string>(const swarm_worker_settings&)> worker_arguments = swarm_worker_arguments;
};

// Serves one stage until the trainer stops it, then prints what it did.
inline int run_swarm_worker(const swarm_worker_settings& o) {
    if (o.parent_pid > 0) {
        // A spawned worker dies with its trainer, even one killed with SIGKILL.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != static_cast<pid_t>(o.parent_pid)) return exit_code::done;
    }
    // What `ps` names the process (the kernel keeps 15 bytes): its program (argv[0], which the
    // trainer sets to its own name) and the stage it asked for, where a worker started from
    // /proc/self/exe would show as "exe". A later move to another stage does not rename it.
    const std::string process_name = std::string(program_invocation_short_name) + " " +
                                     (o.stage >= 0 ? "s" + std::to_string(o.stage) : std::string("worker"));
    ::prctl(PR_SET_NAME, process_name.c_str());
    require(!o.rendezvous.empty(), "--rendezvous", o.rendezvous,
            "a worker needs the trainer's HOST:PORT (the trainer prints it)");
    swarm::net::worker w({.rendezvous = o.rendezvous,
                          .requested_id = o.id,
                          .requested_stage = o.stage,
                          .host = o.host,
                          .connect_timeout_seconds = o.connect_timeout_s,
                          .fetch_timeout_seconds = o.fetch_timeout_s});
    const auto report = w.run();
    std::printf("%s\n", report.summary().c_str());
    return exit_code::done;
}

class swarm_trainer {
public:
    swarm_trainer(const settings& s, const swarm_settings& swarm, const nn::gpt_config& model,
                  swarm_program program = {})
        : s_(s), o_(swarm), model_(model), program_(std::move(program)) {}

    // Trains s.steps steps; throws weft::error on bad input (before any worker starts) and on
    // a failed run (after stopping the workers).
    int run() {
        require(!s_.data.empty(), "--data", s_.data,
                "name an llm.c token file (make one with make_dataset --out-dir DIR)");
        require(s_.save.empty(), "--save", s_.save,
                "is not supported by swarm_train: save checkpoints with --checkpoint-dir (the weights live on the "
                "workers; the trainer fetches them for each checkpoint)");
        require(s_.resume.empty() || s_.init_from.empty(), "--resume", s_.resume,
                "cannot be combined with --init-from: --resume continues a run from its checkpoint directory, "
                "--init-from starts a new one from weights");
        const auto tokens = io::read_token_file(s_.data);
        for (const auto token : tokens.tokens())
            if (token >= model_.vocab_size)
                throw invalid_argument(
                    "--vocab", model_.vocab_size,
                    "the --data file holds token " + std::to_string(token) + "; use a larger --vocab");
        const auto plan = swarm::parse_fault_plan(o_.fails, o_.stalls, o_.slows, o_.joins);
        const long long initial_workers = static_cast<long long>(o_.stages) * o_.workers_per_stage;
        if (o_.spawn) {
            require(initial_workers <= max_spawned_workers, "--stages x --workers-per-stage", initial_workers,
                    "must be at most " + std::to_string(max_spawned_workers) +
                        " with --spawn (each worker is a process on this machine)");
            swarm::check_spawned(plan, initial_workers);
        }
        const train::lr_schedule lr{
            .lr = s_.lr, .min_lr = s_.final_lr(), .warmup_steps = s_.warmup_steps, .decay_steps = s_.decay_end()};
        lr.validate();
        const optim::optimizer_options optimizer{
            .kind = optim::parse_optimizer_kind(s_.optimizer), .lr = s_.lr, .weight_decay = s_.weight_decay};
        // Before any worker starts: one that cannot load the weights would never arrive, and
        // the run would say only that, after --wait-s.
        const auto units = swarm::swarm_stage_units(model_, o_.stages, s_.partition);
        if (!s_.init_from.empty()) check_initial_weights(units);
        // The checkpoint a resumed run goes on from, checked whole before any worker starts;
        // and a root that can take checkpoints, never another run's (run/checkpoint_root_guard.hpp).
        std::optional<swarm::swarm_restore> restored;
        if (!s_.resume.empty()) restored = swarm::load_swarm_checkpoint(s_.resume, model_, units, optimizer, "--resume");
        if (!s_.checkpoint_dir.empty()) {
            require_fresh_checkpoint_root(s_.checkpoint_dir, !s_.resume.empty(), s_.overwrite);
            io::prepare_checkpoint_root(s_.checkpoint_dir, "--checkpoint-dir");
        }
        const long long first_step = restored ? static_cast<long long>(restored->manifest.step) : 0;
        swarm::net::trainer trainer({.model = model_,
                                     .stages = o_.stages,
                                     .partition = s_.partition,
                                     .batch = s_.batch,
                                     .microbatches = s_.microbatches,
                                     .max_in_flight = o_.in_flight,
                                     .optimizer = optimizer,
                                     .grad_clip = s_.grad_clip,
                                     .init_from = s_.init_from,
                                     .listen = o_.listen,
                                     .heartbeat_seconds = o_.heartbeat_s,
                                     .seed = s_.seed,
                                     .max_attempts = o_.max_attempts,
                                     .wait_for_worker_seconds = o_.wait_s,
                                     .compress_block = o_.compress_block,
                                     .chunk_elements = o_.state_chunk,
                                     .faults = plan.faults,
                                     .rebalance_seconds = o_.rebalance_s,
                                     .catch_up_steps = o_.catch_up_steps,
                                     .rebalancing = {}});
        if (restored) {
            std::printf("resumed at step %lld from %s\n", first_step, restored->directory.c_str());
            trainer.restore(std::move(*restored));
        }
        const std::string address = trainer.address();
        std::printf("weft %s | rendezvous %s | stages %d (units", program_.name.c_str(), address.c_str(), o_.stages);
        for (const auto& u : trainer.stage_units()) std::printf(" [%d, %d)", u.first, u.last);
        std::printf(") | batch %d | microbatches %d | compression %s\n", s_.batch, s_.microbatches,
                    o_.compress_block == 0 ? "off" : ("8-bit, blocks of " + std::to_string(o_.compress_block)).c_str());
        std::fflush(stdout);
        child_processes children(program_.executable, program_.name);
        const auto start_worker = [&](long long id, int stage, const std::string& rendezvous) {
            children.start(id, program_.worker_arguments({.rendezvous = rendezvous,
                                                          .host = "127.0.0.1",
                                                          .id = id,
                                                          .stage = stage,
                                                          .parent_pid = ::getpid()}));
        };
        if (o_.spawn)
            for (long long w = 0; w < initial_workers; ++w) start_worker(w, static_cast<int>(w % o_.stages), address);
        else
            std::printf("waiting for %d worker(s) per stage: %s --role worker --rendezvous %s\n", o_.workers_per_stage,
                        program_.name.c_str(), address.c_str());
        std::fflush(stdout);
        std::ofstream log;
        if (!s_.log_json.empty()) {
            log.open(s_.log_json);
            require(log.good(), "--log-json", s_.log_json, "must be a writable file path");
        }
        long long saved_step = -1;
        bool replaced_old = !s_.overwrite || !s_.resume.empty();
        const auto checkpoint = [&](long long steps_done) {
            if (!replaced_old) remove_checkpoints(s_.checkpoint_dir);  // --overwrite: at the first save, not before
            replaced_old = true;
            const auto saved = trainer.save_checkpoint(s_.checkpoint_dir, run_settings(), s_.keep);
            saved_step = steps_done;
            std::printf("saved checkpoint %s\n", saved.directory.c_str());
            std::fflush(stdout);
        };
        if (first_step >= s_.steps)
            std::printf("already at step %lld, the --steps %lld this run ends at: nothing to train\n", first_step,
                        s_.steps);
        std::set<long long> joined;  // --join workers started (a step replayed after a rollback starts none again)
        try {
            trainer.wait_for_workers(o_.workers_per_stage, o_.wait_s);
            for (long long step = first_step; step < s_.steps; ++step) {
                // A worker of --join starts before its step and joins while it runs; the next
                // step waits until it is ready, so that the faults of a test happen after it is.
                for (const auto& [id, at] : plan.joins)
                    if (at == step && o_.spawn && joined.insert(id).second)
                        start_worker(id, static_cast<int>(id % o_.stages),
                                     o_.join_through_peer ? a_live_worker(trainer) : address);
                for (const auto& [id, at] : plan.joins)
                    if (at + 1 == step && o_.spawn)
                        trainer.wait_for_worker(static_cast<swarm::worker_id>(id), o_.wait_s);
                const double step_lr = lr.at(step);
                swarm::net::step_result r;
                try {
                    r = trainer.step(data::batch_at(tokens, step, s_.batch, model_.seq_len), step_lr);
                } catch (const swarm::net::stage_lost& lost) {
                    step = roll_back(trainer, lost, units, optimizer, log) - 1;  // the loop's ++ makes it the step
                    continue;
                }
                report_step(r, step_lr, log);
                if (!s_.checkpoint_dir.empty() && s_.checkpoint_every > 0 && (step + 1) % s_.checkpoint_every == 0)
                    checkpoint(step + 1);
            }
            if (!s_.checkpoint_dir.empty() && saved_step != std::max(first_step, s_.steps)) checkpoint(s_.steps);
        } catch (...) {
            trainer.stop_workers();
            throw;
        }
        trainer.stop_workers();
        const int killed = children.reap(std::chrono::seconds(5));
        std::printf("workers |");
        for (const auto& m : trainer.members())
            std::printf(" %llu: stage %d, %lld calls, %lld timeouts, %s |", static_cast<unsigned long long>(m.id),
                        m.stage, m.calls, m.timeouts, m.live ? "live" : "gone");
        std::printf("\n");
        if (killed > 0) std::printf("%d worker(s) did not stop in 5 s and were killed\n", killed);
        return exit_code::done;
    }

private:
    // A stage lost every worker: the run goes back to the newest checkpoint in --checkpoint-dir
    // (or to its start, without one), losing the steps since, and waits up to --wait-s for
    // every stage to have a worker again (a joiner of the lost stage fetches its state from
    // the checkpoint, which the trainer serves). Returns the step the run goes on from.
    long long roll_back(swarm::net::trainer& trainer, const swarm::net::stage_lost& lost,
                        const std::vector<nn::unit_range>& units, const optim::optimizer_options& optimizer,
                        std::ofstream& log) const {
        long long to = 0;
        std::string from = "the initial weights (no checkpoint yet)";
        if (!s_.checkpoint_dir.empty() && !checkpoints_in(s_.checkpoint_dir).empty()) {
            auto restored = swarm::load_swarm_checkpoint(s_.checkpoint_dir, model_, units, optimizer, "--checkpoint-dir");
            to = static_cast<long long>(restored.manifest.step);
            from = restored.directory.string();
            trainer.restore(std::move(restored));
        } else {
            trainer.restart_from_start();
        }
        std::printf("rollback | stage %d lost every worker at step %llu | the run goes back to step %lld from %s, "
                    "losing %lld step(s); waiting up to %g s (--wait-s) for a worker of every stage\n",
                    lost.stage, static_cast<unsigned long long>(lost.step), to, from.c_str(),
                    static_cast<long long>(lost.step) - to, o_.wait_s);
        std::fflush(stdout);
        if (log.is_open())
            log << nlohmann::ordered_json{{"event", "rollback"}, {"lost_stage", lost.stage}, {"at_step", lost.step},
                                          {"to_step", to}}
                       .dump()
                << '\n'
                << std::flush;
        trainer.wait_for_workers(1, o_.wait_s);
        return to;
    }

    // The settings a checkpoint's manifest keeps, to show how the run was made.
    [[nodiscard]] nlohmann::json run_settings() const {
        return {{"program", program_.name}, {"data", s_.data},          {"batch", s_.batch},
                {"steps", s_.steps},        {"lr", s_.lr},              {"min_lr", s_.final_lr()},
                {"warmup_steps", s_.warmup_steps}, {"decay_steps", s_.decay_end()}, {"optimizer", s_.optimizer},
                {"weight_decay", s_.weight_decay}, {"grad_clip", s_.grad_clip}, {"seed", s_.seed},
                {"stages", o_.stages},      {"compress_block", o_.compress_block}};
    }

    // --init-from against every stage's tensors, as each worker will load them.
    void check_initial_weights(const std::vector<nn::unit_range>& stages) const {
        io::safetensors_file file;
        try {
            file = io::read_safetensors(s_.init_from);
        } catch (const error& e) {
            throw invalid_argument("--init-from", s_.init_from,
                                   std::string("must be a readable safetensors file of this model: ") + e.what());
        }
        for (const nn::unit_range units : stages)
            swarm::stage_service::check_weights(file, nn::gpt_stage<exec::cpu>::layout(model_, units));
    }

    // The address a live worker takes newcomers' hellos at (--join-through-peer).
    static std::string a_live_worker(const swarm::net::trainer& trainer) {
        for (const auto& m : trainer.members())
            if (m.live) return m.address;
        throw error("--join-through-peer: no live worker to join through");
    }

    // The step line (and a rebalancing move's), and the step's JSON object where --log-json is open.
    void report_step(const swarm::net::step_result& r, double step_lr, std::ofstream& log) const {
        const double tokens_per_s = double(s_.batch) * model_.seq_len / r.seconds;
        std::string served;
        nlohmann::json served_json = nlohmann::json::array();
        for (std::size_t k = 0; k < r.served.size(); ++k) {
            served += (k ? " | s" : "s") + std::to_string(k) + ":";
            nlohmann::json ids = nlohmann::json::array();
            for (const auto id : r.served[k]) {
                served += " " + std::to_string(id);
                ids.push_back(id);
            }
            served_json.push_back(ids);
        }
        std::printf(
            "step %lld | loss %.6f | samples %lld | lr %.2e | norm %.4f | %.1f ms | tok/s %.0f | retries %lld"
            " | late %lld | %s\n",
            r.step, r.loss, r.samples, step_lr, r.grad_norm, 1e3 * r.seconds, tokens_per_s, r.retried_calls,
            r.late_replies, served.c_str());
        nlohmann::json moved_json;  // null: no move after this step
        if (r.moved) {
            std::printf(
                "rebalance | moved worker %llu from stage %d to stage %d | slower stage of the two: %.1f -> "
                "%.1f micro-batches/s (predicted)\n",
                static_cast<unsigned long long>(r.moved->worker), r.moved->from, r.moved->to,
                r.moved->bottleneck_before, r.moved->bottleneck_after);
            moved_json = {{"worker", r.moved->worker}, {"from", r.moved->from}, {"to", r.moved->to}};
        }
        std::fflush(stdout);
        if (log.is_open())
            log << nlohmann::ordered_json{{"step", r.step},
                                          {"loss", r.loss},
                                          {"samples", r.samples},
                                          {"lr", step_lr},
                                          {"grad_norm", r.grad_norm},
                                          {"ms", 1e3 * r.seconds},
                                          {"tokens_per_s", tokens_per_s},
                                          {"retried_calls", r.retried_calls},
                                          {"late_replies", r.late_replies},
                                          {"dropped_messages", r.dropped_messages},
                                          {"wire_bytes_per_microbatch", r.wire_bytes_per_microbatch},
                                          {"plain_bytes_per_microbatch", r.plain_bytes_per_microbatch},
                                          {"served", served_json},
                                          {"moved", moved_json}}
                       .dump()
                << '\n'
                << std::flush;
    }

    settings s_;
    swarm_settings o_;
    nn::gpt_config model_;
    swarm_program program_;
};

}  // namespace weft::run
