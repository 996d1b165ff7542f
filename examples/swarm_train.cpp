// examples/swarm_train: trains GPT-2 as a SWARM pipeline (docs/swarm.md). The trainer is
// the rendezvous; each stage is served by a pool of worker processes that may crash, stall,
// run slow or join at any time, and training goes on, counting every sample exactly once.
//
//   swarm_train --spawn --stages 2 --workers-per-stage 2 --data data/train.bin --steps 20
//   swarm_train --spawn ... --fail 1@5 --stall 2@8:3 --slow 3:2      (faults on purpose)
//   swarm_train --listen 0.0.0.0:5555 --stages 2 --workers-per-stage 2 --data ...   (host A)
//   swarm_train --role worker --rendezvous hostA:5555 --host hostB                  (host B, ...)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "weft/data/token_batches.hpp"
#include "weft/io/token_file.hpp"
#include "weft/swarm/net/trainer.hpp"
#include "weft/swarm/net/worker.hpp"
#include "weft/train/lr_schedule.hpp"
#include "weft/train/step_log.hpp"
#include "weft/run/child_processes.hpp"
#include "weft/run/options.hpp"

namespace {

struct options : weft::run::settings {
    weft::run::gpt_sizes sizes;
    std::string role = "trainer";
    int stages = 2;
    int workers_per_stage = 2;
    bool spawn = false;
    bool join_through_peer = false;
    std::string listen = "127.0.0.1:0";
    std::string rendezvous;
    std::string host = "127.0.0.1";
    long long id = -1;
    int stage = -1;
    long long parent_pid = 0;
    std::vector<std::string> fails, stalls, slows, joins;
    std::size_t compress_block = 0;
    double heartbeat_s = 0.25;
    double rebalance_s = 0;
    int catch_up_steps = 4;
    int in_flight = 0;
    std::size_t state_chunk = 1 << 16;
    int max_attempts = 8;
    double wait_s = 30;
    double connect_timeout_s = 10;

    [[nodiscard]] weft::nn::gpt_config model() const {
        return {.num_layers = sizes.layers, .d_model = sizes.d_model, .num_heads = sizes.heads,
                .vocab_size = sizes.vocab, .seq_len = sizes.seq_len, .seed = seed};
    }
};

// ---- fault flags: W@STEP[:forward|backward], W@STEP:SECONDS, W:FACTOR, W@STEP ----------
// A non-negative integer of `flag`'s value `whole`, which must read as `form`.
long long parse_count(const std::string& text, const std::string& flag, const std::string& whole,
                      const std::string& form) {
    long long v = 0;
    const auto [end, failure] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (failure != std::errc() || end != text.data() + text.size() || v < 0)
        throw weft::invalid_argument(flag, whole, "must read " + form + " with non-negative integers W and STEP");
    return v;
}
double parse_positive(const std::string& text, const std::string& flag, const std::string& whole) {
    try {
        std::size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size() && std::isfinite(v) && v > 0) return v;
    } catch (const std::exception&) {
    }
    throw weft::invalid_argument(flag, whole, "needs a positive number after the colon");
}
std::map<std::int64_t, weft::swarm::worker_faults> parse_faults(const options& o) {
    std::map<std::int64_t, weft::swarm::worker_faults> faults;
    for (const auto& f : o.fails) {
        const auto at = f.find('@');
        if (at == std::string::npos) throw weft::invalid_argument("--fail", f, "must read W@STEP[:forward|backward]");
        const auto colon = f.find(':', at);
        const std::string form = "W@STEP[:forward|backward]";
        auto& w = faults[parse_count(f.substr(0, at), "--fail", f, form)];
        w.fail_step = parse_count(f.substr(at + 1, colon == std::string::npos ? std::string::npos : colon - at - 1),
                                  "--fail", f, form);
        if (colon != std::string::npos) {
            const std::string phase = f.substr(colon + 1);
            if (phase == "forward") w.fail_phase = weft::swarm::worker_faults::phase::forward;
            else if (phase == "backward") w.fail_phase = weft::swarm::worker_faults::phase::backward;
            else throw weft::invalid_argument("--fail", f, "the phase after the colon must be forward or backward");
        }
    }
    for (const auto& s : o.stalls) {
        const auto at = s.find('@'), colon = s.find(':');
        if (at == std::string::npos || colon == std::string::npos || colon < at)
            throw weft::invalid_argument("--stall", s, "must read W@STEP:SECONDS");
        auto& w = faults[parse_count(s.substr(0, at), "--stall", s, "W@STEP:SECONDS")];
        w.stall_step = parse_count(s.substr(at + 1, colon - at - 1), "--stall", s, "W@STEP:SECONDS");
        w.stall_seconds = parse_positive(s.substr(colon + 1), "--stall", s);
    }
    for (const auto& s : o.slows) {
        const auto colon = s.find(':');
        if (colon == std::string::npos) throw weft::invalid_argument("--slow", s, "must read W:FACTOR");
        auto& w = faults[parse_count(s.substr(0, colon), "--slow", s, "W:FACTOR")];
        w.slow_factor = parse_positive(s.substr(colon + 1), "--slow", s);
        if (w.slow_factor < 1) throw weft::invalid_argument("--slow", s, "FACTOR must be at least 1");
    }
    return faults;
}

int run_worker(const options& o) {
    if (o.parent_pid > 0) {
        // A spawned worker dies with its trainer, even one killed with SIGKILL.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != static_cast<pid_t>(o.parent_pid)) return 0;
    }
    weft::require(!o.rendezvous.empty(), "--rendezvous", o.rendezvous,
                  "a worker needs the trainer's HOST:PORT (the trainer prints it)");
    weft::swarm::net::worker w({.rendezvous = o.rendezvous, .requested_id = o.id, .requested_stage = o.stage,
                                .host = o.host, .connect_timeout_seconds = o.connect_timeout_s});
    const auto report = w.run();
    std::printf("%s\n", report.summary().c_str());
    return 0;
}

// The address a live worker takes newcomers' hellos at (--join-through-peer).
std::string a_live_worker(const weft::swarm::net::trainer& trainer) {
    for (const auto& m : trainer.members())
        if (m.live) return m.address;
    throw weft::error("--join-through-peer: no live worker to join through");
}

// Worker processes --spawn starts on this one machine at most.
constexpr long long max_spawned_workers = 1024;

int run_trainer(const options& o, const std::string& program) {
    weft::require(!o.data.empty(), "--data", o.data, "name an llm.c token file (make one with make_dataset --out-dir DIR)");
    weft::require(o.save.empty(), "--save", o.save,
                  "is not supported by swarm_train: the weights live on the workers (train_gpt --save does it)");
    const auto tokens = weft::io::read_token_file(o.data);
    for (const auto token : tokens.tokens())
        if (token >= o.sizes.vocab)
            throw weft::invalid_argument("--vocab", o.sizes.vocab,
                                         "the --data file holds token " + std::to_string(token) + "; use a larger --vocab");
    auto faults = parse_faults(o);
    std::map<long long, long long> joins;  // worker id -> the step before which it is started
    for (const auto& j : o.joins) {
        const auto at = j.find('@');
        if (at == std::string::npos) throw weft::invalid_argument("--join", j, "must read W@STEP");
        const long long id = parse_count(j.substr(0, at), "--join", j, "W@STEP");
        if (joins.contains(id)) throw weft::invalid_argument("--join", j, "names worker " + std::to_string(id) + " twice");
        joins[id] = parse_count(j.substr(at + 1), "--join", j, "W@STEP");
    }
    // With --spawn this program starts every worker, so each id a fault or a join names can be
    // checked now: a fault for a worker that never starts would never happen, and a join with
    // the id of a worker already running would be refused by the trainer mid-run.
    const long long initial_workers = static_cast<long long>(o.stages) * o.workers_per_stage;
    if (o.spawn) {
        weft::require(initial_workers <= max_spawned_workers, "--stages x --workers-per-stage", initial_workers,
                      "must be at most " + std::to_string(max_spawned_workers) +
                          " with --spawn (each worker is a process on this machine)");
        const std::string at_once = "--spawn starts workers 0.." + std::to_string(initial_workers - 1);
        for (const auto& [id, at] : joins)
            if (id < initial_workers)
                throw weft::invalid_argument("--join", std::to_string(id) + "@" + std::to_string(at),
                                             "must name a new worker: " + at_once);
        for (const auto& [id, fault] : faults)
            if (id >= initial_workers && !joins.contains(id))
                throw weft::invalid_argument("--fail, --stall or --slow worker", id,
                                             "is not a worker this run starts: " + at_once + " and the --join ids");
    }
    const weft::train::lr_schedule lr{.lr = o.lr, .min_lr = o.final_lr(), .warmup_steps = o.warmup_steps,
                                      .decay_steps = o.decay_end()};
    lr.validate();
    const weft::optim::optimizer_options optimizer{.kind = weft::optim::parse_optimizer_kind(o.optimizer), .lr = o.lr,
                                                   .weight_decay = o.weight_decay};
    weft::swarm::net::trainer trainer({.model = o.model(), .stages = o.stages, .partition = o.partition,
                                       .batch = o.batch, .microbatches = o.microbatches,
                                       .max_in_flight = o.in_flight, .optimizer = optimizer,
                                       .grad_clip = o.grad_clip, .init_from = o.init_from, .listen = o.listen,
                                       .heartbeat_seconds = o.heartbeat_s, .seed = o.seed,
                                       .max_attempts = o.max_attempts, .wait_for_worker_seconds = o.wait_s,
                                       .compress_block = o.compress_block, .chunk_elements = o.state_chunk,
                                       .faults = faults, .rebalance_seconds = o.rebalance_s,
                                       .catch_up_steps = o.catch_up_steps, .rebalancing = {}});
    const std::string address = trainer.address();
    std::printf("weft swarm_train | rendezvous %s | stages %d (units", address.c_str(), o.stages);
    for (const auto& u : trainer.stage_units()) std::printf(" [%d, %d)", u.first, u.last);
    std::printf(") | batch %d | microbatches %d | compression %s\n", o.batch, o.microbatches,
                o.compress_block == 0 ? "off" : ("8-bit, blocks of " + std::to_string(o.compress_block)).c_str());
    std::fflush(stdout);
    weft::run::child_processes children(program);
    const auto start_worker = [&](long long id, int stage, const std::string& rendezvous) {
        children.start(id, {"--role", "worker", "--rendezvous", rendezvous, "--id", std::to_string(id), "--host",
                            "127.0.0.1", "--parent-pid", std::to_string(::getpid()), "--stage", std::to_string(stage)});
    };
    const int initial = static_cast<int>(initial_workers);
    if (o.spawn)
        for (int w = 0; w < initial; ++w) start_worker(w, w % o.stages, address);
    else
        std::printf("waiting for %d worker(s) per stage: swarm_train --role worker --rendezvous %s\n",
                    o.workers_per_stage, address.c_str());
    std::fflush(stdout);
    std::ofstream log;
    if (!o.log_json.empty()) {
        log.open(o.log_json);
        weft::require(log.good(), "--log-json", o.log_json, "must be a writable file path");
    }
    try {
        trainer.wait_for_workers(o.workers_per_stage, o.wait_s);
        for (long long step = 0; step < o.steps; ++step) {
            // A worker of --join starts before its step and joins while it runs; the next step
            // waits until it is ready, so that the faults of a test happen after it is.
            for (const auto& [id, at] : joins)
                if (at == step && o.spawn)
                    start_worker(id, static_cast<int>(id % o.stages),
                                 o.join_through_peer ? a_live_worker(trainer) : address);
            for (const auto& [id, at] : joins)
                if (at + 1 == step && o.spawn) trainer.wait_for_worker(static_cast<weft::swarm::worker_id>(id), o.wait_s);
            const double step_lr = lr.at(step);
            const auto r = trainer.step(weft::data::batch_at(tokens, step, o.batch, o.sizes.seq_len), step_lr);
            const double tokens_per_s = double(o.batch) * o.sizes.seq_len / r.seconds;
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
            std::printf("step %lld | loss %.6f | samples %lld | lr %.2e | norm %.4f | %.1f ms | tok/s %.0f | retries %lld"
                        " | late %lld | %s\n",
                        r.step, r.loss, r.samples, step_lr, r.grad_norm, 1e3 * r.seconds, tokens_per_s,
                        r.retried_calls, r.late_replies, served.c_str());
            nlohmann::json moved_json;  // null: no move after this step
            if (r.moved) {
                std::printf("rebalance | moved worker %llu from stage %d to stage %d | slower stage of the two: %.1f -> "
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
                                              {"wire_bytes_per_microbatch", r.wire_bytes_per_microbatch},
                                              {"plain_bytes_per_microbatch", r.plain_bytes_per_microbatch},
                                              {"served", served_json},
                                              {"moved", moved_json}}
                           .dump()
                    << '\n'
                    << std::flush;
        }
    } catch (...) {
        trainer.stop_workers();
        throw;
    }
    trainer.stop_workers();
    const int killed = children.reap(std::chrono::seconds(5));
    std::printf("workers |");
    for (const auto& m : trainer.members())
        std::printf(" %llu: stage %d, %lld calls, %lld timeouts, %s |", static_cast<unsigned long long>(m.id), m.stage,
                    m.calls, m.timeouts, m.live ? "live" : "gone");
    std::printf("\n");
    if (killed > 0) std::printf("%d worker(s) did not stop in 5 s and were killed\n", killed);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Train GPT-2 as a SWARM pipeline: pools of worker processes per stage that may fail, stall or join."};
    options o;
    using namespace weft::run::options;
    weft::run::add_options(app, o, training | data | weights | logs, o.sizes);
    app.add_option("--role", o.role, "trainer (the rendezvous, drives the steps) or worker")
        ->check(CLI::IsMember({"trainer", "worker"}))
        ->capture_default_str();
    app.add_option("--stages", o.stages, "pipeline stages")->check(weft::run::int_in(1, 1 << 16))->capture_default_str();
    app.add_option("--workers-per-stage", o.workers_per_stage, "workers each stage needs before training starts")
        ->check(weft::run::int_in(1, 1 << 16))
        ->capture_default_str();
    auto* spawn = app.add_flag("--spawn", o.spawn, "start the workers as child processes on this machine");
    app.add_option("--partition", o.partition, "units per stage, e.g. 2,2 (default: balanced by cost)")->delimiter(',');
    app.add_option("--listen", o.listen, "trainer: HOST:PORT the rendezvous binds (port 0: any free one)")
        ->capture_default_str();
    app.add_option("--rendezvous", o.rendezvous, "worker: HOST:PORT of the trainer's rendezvous");
    app.add_option("--host", o.host, "worker: the address other workers reach this one at")->capture_default_str();
    app.add_option("--id", o.id, "worker: the id to ask for (faults name workers by id)");
    app.add_option("--stage", o.stage, "worker: the stage to ask for (default: where the trainer wants)");
    app.add_option("--parent-pid", o.parent_pid, "worker: exit with this process (--spawn sets it)");
    app.add_option("--fail", o.fails,
                   "worker W kills itself (SIGKILL) at its first call (of the phase) at or after STEP: "
                   "W@STEP[:forward|backward]");
    app.add_option("--stall", o.stalls, "worker W's first call at or after STEP waits SECONDS first: W@STEP:SECONDS");
    app.add_option("--slow", o.slows, "worker W computes FACTOR times slower: W:FACTOR");
    app.add_option("--join", o.joins,
                   "with --spawn: start one more worker W (for stage W mod --stages) before step STEP, which it "
                   "joins while it runs: W@STEP")
        ->needs(spawn);
    app.add_flag("--join-through-peer", o.join_through_peer,
                 "with --join: the new worker says hello to a live worker, which sends it on to the trainer");
    app.add_option("--compress-block", o.compress_block,
                   "8-bit quantization of activations and their gradients, one scale per this many values (0: off)")
        ->check(weft::run::int_in(0, 1 << 24))
        ->capture_default_str();
    app.add_option("--heartbeat-s", o.heartbeat_s, "seconds between worker heartbeats (12 missed: the worker expires)")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    app.add_option("--rebalance-s", o.rebalance_s,
                   "every this many seconds, between steps, one worker may move from the least to the most loaded "
                   "stage (0: never)")
        ->check(weft::run::finite_at_least(0, true))
        ->capture_default_str();
    app.add_option("--in-flight", o.in_flight, "micro-batches going through the stages at once (0: all of a step's)")
        ->check(weft::run::int_in(0, 1 << 20))
        ->capture_default_str();
    app.add_option("--catch-up-steps", o.catch_up_steps,
                   "steps of averaged gradients the trainer keeps, so that a worker whose fetched state is up to "
                   "that many steps old replays them instead of fetching again (0: it fetches again)")
        ->check(weft::run::int_in(0, 1 << 10))
        ->capture_default_str();
    app.add_option("--state-chunk", o.state_chunk, "values per chunk a joining worker fetches from one peer at a time")
        ->check(weft::run::int_in(1, 1 << 26))
        ->capture_default_str();
    app.add_option("--max-attempts", o.max_attempts, "sends of one call before the step fails")
        ->check(weft::run::int_in(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--wait-s", o.wait_s, "seconds to wait for workers (at the start, and for a stage with none live)")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    app.add_option("--connect-timeout-s", o.connect_timeout_s, "worker: seconds to reach the rendezvous")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;
    const char* program = o.role == "worker" ? "swarm_train worker" : "swarm_train";
    try {
        if (o.role == "worker") return run_worker(o);
        return run_trainer(o, "/proc/self/exe");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 2;
    }
}
