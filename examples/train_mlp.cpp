// examples/train_mlp: a pipelined training run of weft's MLP on a data set it
// generates deterministically. Under mpirun it uses the MPI communicator, one rank
// per process; without mpirun, `--ranks N` runs N ranks as threads of this process.
//
//   mpirun -np 4 ./train_mlp --schedule 1f1b --pp 4 --microbatches 8 --steps 50
//   ./train_mlp --ranks 4 --schedule gpipe --pp 4 --microbatches 8 --steps 50
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cli_checks.hpp"
#include "weft/weft.hpp"
#include "launch.hpp"

namespace {

struct run_options {
    std::string schedule = "1f1b";
    int pp = 1;
    int dp = 1;
    int microbatches = 8;
    int chunks = 0;  // 0: the schedule's natural value (2 for interleaving and V shapes, else 1)
    int steps = 50;
    int batch = 64;
    int ranks = 0;  // 0: the world's size (1 without mpirun)
    int input_dim = 32;
    int hidden = 64;
    int blocks = 6;
    int classes = 8;
    std::string optimizer = "adamw";
    double lr = 3e-3;
    double weight_decay = 0.0;
    unsigned long long seed = 1234;
};

using schedules = weft::sched::all_schedules;


template <weft::communicator Comm>
void train(Comm& world, const run_options& o) {
    const auto schedule = weft::sched::parse_schedule_kind(o.schedule);
    const weft::parallel_config config({.pp = o.pp, .dp = o.dp, .microbatches = o.microbatches,
                                        .chunks = o.chunks != 0 ? o.chunks : schedule.default_chunks(),
                                        .schedule = schedule, .world_size = world.size()});
    const weft::nn::mlp_config model{.input_dim = o.input_dim, .hidden_dim = o.hidden, .num_blocks = o.blocks,
                                     .num_classes = o.classes, .seed = o.seed};
    const weft::train::engine_options options{
        .batch_size = o.batch,
        .optimizer = {.kind = weft::optim::parse_optimizer_kind(o.optimizer),
                      .lr = o.lr,
                      .weight_decay = o.weight_decay}};
    weft::train::engine<schedules, weft::shard::replicate, Comm, weft::exec::cpu> engine(world, config, model, options);
    const weft::data::synthetic_dataset data(o.input_dim, o.classes, o.seed + 1);
    if (world.rank() == 0)
        std::printf("weft train_mlp | schedule %s | pp %d | dp %d | microbatches %d | chunks %d | batch %d | %d blocks of width %d\n",
                    o.schedule.c_str(), o.pp, o.dp, o.microbatches, config.chunks(), o.batch, o.blocks, o.hidden);
    for (int step = 0; step < o.steps; ++step) {
        const auto stats = engine.step(data.batch(step, o.batch));
        if (world.rank() == 0) std::printf("%s\n", weft::train::format_step(stats).c_str());
    }
}

}  // namespace

int main(int argc, char** argv) {
    using weft_examples::finite_at_least;
    using weft_examples::int_in;
    CLI::App app{"Train weft's MLP with a pipeline schedule, over MPI (under mpirun) or threads (--ranks N)."};
    run_options o;
    app.add_option("--schedule", o.schedule, "pipeline schedule: " + weft::sched::schedule_name_list())
        ->capture_default_str();
    app.add_option("--pp", o.pp, "pipeline stages")->check(int_in(1, 1 << 16))->capture_default_str();
    app.add_option("--dp", o.dp, "data-parallel replicas (gradients averaged)")
        ->check(int_in(1, 1 << 16))
        ->capture_default_str();
    app.add_option("--microbatches", o.microbatches, "micro-batches per step")
        ->check(int_in(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--chunks", o.chunks,
                   "model chunks (stages) per pipeline rank; default: 2 for interleaved, looped-bfs, zbv and "
                   "dualpipev, else 1")
        ->check(int_in(0, 1 << 10));
    app.add_option("--steps", o.steps, "training steps")->check(int_in(0, 1 << 30))->capture_default_str();
    app.add_option("--batch", o.batch, "global batch size in samples (a multiple of dp*microbatches)")
        ->check(int_in(1, 1 << 24))
        ->capture_default_str();
    app.add_option("--ranks", o.ranks, "without mpirun: ranks to run as threads (default pp*dp)")
        ->check(int_in(1, 1 << 16));
    app.add_option("--input-dim", o.input_dim, "input features")->check(int_in(1, 1 << 16))->capture_default_str();
    app.add_option("--hidden", o.hidden, "hidden width")->check(int_in(1, 1 << 16))->capture_default_str();
    app.add_option("--blocks", o.blocks, "residual blocks (the model has blocks+2 layers to partition)")
        ->check(int_in(0, 1 << 16))
        ->capture_default_str();
    app.add_option("--classes", o.classes, "classes of the synthetic task")
        ->check(int_in(2, 1 << 16))
        ->capture_default_str();
    app.add_option("--optimizer", o.optimizer, "adamw or sgd")->capture_default_str();
    app.add_option("--lr", o.lr, "learning rate")->check(finite_at_least(0, false))->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "decoupled weight decay (2-D tensors only)")
        ->check(finite_at_least(0, true))
        ->capture_default_str();
    app.add_option("--seed", o.seed, "seed of weights and data")->capture_default_str();
    weft_examples::integers_in_decimal(app);
    CLI11_PARSE(app, argc, argv);

    const auto ranks = weft_examples::ranks_to_run("train_mlp", "--pp x --dp", static_cast<long long>(o.pp) * o.dp,
                                                   o.ranks);
    if (!ranks) return 2;
    return weft_examples::run("train_mlp", argc, argv, *ranks, [&](auto& world) { train(world, o); });
}
