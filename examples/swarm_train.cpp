// examples/swarm_train: trains GPT-2 as a SWARM pipeline (docs/swarm.md). The trainer is
// the rendezvous; each stage is served by a pool of worker processes that may crash, stall,
// run slow or join at any time, and training goes on, counting every sample exactly once.
//
//   swarm_train --spawn --stages 2 --workers-per-stage 2 --data data/train.bin --steps 20
//   swarm_train --spawn ... --fail 1@5 --stall 2@8:3 --slow 3:2      (faults on purpose)
//   swarm_train --listen 0.0.0.0:5555 --stages 2 --workers-per-stage 2 --data ...   (host A)
//   swarm_train --role worker --rendezvous hostA:5555 --host hostB                  (host B, ...)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "weft/run/options.hpp"
#include "weft/run/swarm_trainer.hpp"

namespace {

// The run (run/settings.hpp), the swarm's options and a worker's (run/swarm_trainer.hpp).
struct options : weft::run::settings, weft::run::swarm_settings, weft::run::swarm_worker_settings {
    weft::run::gpt_sizes sizes;
    std::string role = "trainer";

    [[nodiscard]] weft::nn::gpt_config model() const {
        return {.num_layers = sizes.layers, .d_model = sizes.d_model, .num_heads = sizes.heads,
                .vocab_size = sizes.vocab, .seq_len = sizes.seq_len, .seed = seed};
    }
};

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Train GPT-2 as a SWARM pipeline: pools of worker processes per stage that may fail, stall or join."};
    options o;
    using namespace weft::run::options;
    weft::run::add_options(app, o, training | data | checkpoints | weights | logs, o.sizes);
    // The weights live on the workers: --help does not offer --save (one file at the end), and
    // the run refuses it, pointing at --checkpoint-dir, which fetches them (run::swarm_trainer).
    app.get_option("--save")->group("");
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
    app.add_option("--fetch-timeout-s", o.fetch_timeout_s,
                   "worker: seconds a peer may take to hand out a chunk of state before it is passed over")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    app.add_option("--connect-timeout-s", o.connect_timeout_s, "worker: seconds to reach the rendezvous")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;
    const char* program = o.role == "worker" ? "swarm_train worker" : "swarm_train";
    try {
        if (o.role == "worker") return weft::run::run_swarm_worker(o);
        return weft::run::swarm_trainer(o, o, o.model(), {.name = "swarm_train"}).run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 2;
    }
}
