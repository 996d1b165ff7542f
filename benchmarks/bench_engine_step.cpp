// Time of one training step of the MLP for each schedule and pipeline depth on the
// in-process backend (ranks are threads). Google Benchmark, JSON with
// --benchmark_format=json. Only the step loop is timed (manual time): the threads,
// engines and weights are built before the clock starts.
//
// On a machine with fewer cores than ranks the figures measure scheduling overhead
// more than pipelining; compare ratios measured in one run.
#include <benchmark/benchmark.h>

#include <chrono>

#include "weft/weft.hpp"

namespace {

using schedules = weft::sched::any_of<weft::sched::gpipe, weft::sched::one_f_one_b>;
constexpr int timed_steps = 10;

void bench_step(benchmark::State& state) {
    const int pp = static_cast<int>(state.range(0));
    const auto schedule = state.range(1) == 0 ? weft::sched::gpipe::kind : weft::sched::one_f_one_b::kind;
    const int microbatches = 8;
    const int batch = 256;
    const weft::nn::mlp_config model{.input_dim = 64, .hidden_dim = 256, .num_blocks = 6, .num_classes = 16};
    const weft::data::synthetic_dataset data(model.input_dim, model.num_classes, 1);
    std::vector<weft::data::classification_batch> batches;
    for (int s = 0; s < timed_steps + 1; ++s) batches.push_back(data.batch(s, batch));

    double total_seconds = 0;
    for (auto _ : state) {
        double seconds = 0;
        weft::comm::local::run(pp, [&](weft::comm::local& world) {
            weft::engine<schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu> engine(
                world, weft::parallel_config({.pp = pp, .microbatches = microbatches, .schedule = schedule,
                                              .world_size = pp}),
                model, {.batch_size = batch, .optimizer = {.lr = 1e-3}});
            engine.step(batches[0]);  // warm-up: first-touch of buffers
            world.barrier();
            const auto start = std::chrono::steady_clock::now();
            for (int s = 1; s <= timed_steps; ++s) engine.step(batches[s]);
            world.barrier();
            if (world.rank() == 0)
                seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        });
        state.SetIterationTime(seconds / timed_steps);
        total_seconds += seconds;
    }
    // From the timed steps alone (a kIsRate counter would divide by the untimed set-up too).
    state.counters["samples_per_s"] =
        static_cast<double>(batch) * timed_steps * static_cast<double>(state.iterations()) / total_seconds;
    state.SetLabel(std::string(weft::to_string(schedule)) + " pp=" + std::to_string(pp));
}

}  // namespace

BENCHMARK(bench_step)
    ->ArgsProduct({{1, 2, 4}, {0, 1}})
    ->ArgNames({"pp", "schedule"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

BENCHMARK_MAIN();
