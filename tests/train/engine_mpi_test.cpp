// The engine over MPI, one rank per process. Each rank computes the single-process
// reference itself (in-process), then the MPI run must match it.
#include "training_run.hpp"

#include "weft/comm/mpi.hpp"

using weft::parallel_config;
using weft::schedule_kind;
using namespace weft_test;

TEST_CASE("pure pipelines over MPI equal the single-process run bit for bit") {
    auto world = weft::comm::mpi::world();
    const int m = 4;
    const run_result reference = single_process_run(m);
    for (const int pp : {1, 2, 4}) {
        if (world.size() % pp != 0) continue;
        // Groups of pp consecutive ranks each run their own pipeline.
        auto pipeline = world.split(world.rank() / pp, world.rank());
        for (const auto schedule : {weft::sched::gpipe::kind, weft::sched::one_f_one_b::kind}) {
            INFO("pp " << pp << " " << weft::to_string(schedule));
            const auto result = train_steps(pipeline, parallel_config({.pp = pp, .microbatches = m,
                                                                       .schedule = schedule, .world_size = pp}));
            require_same_training(result, reference, 0);
        }
    }
}

TEST_CASE("pipeline x data parallel over the whole MPI world equals the single-process run") {
    auto world = weft::comm::mpi::world();
    for (const int pp : {1, 2, 4}) {
        if (world.size() % pp != 0) continue;
        const int dp = world.size() / pp;
        const int m = std::max(pp, 2);
        // dp replicas of m micro-batches see the same samples as one process with dp*m;
        // only the order of the gradient sums differs, hence 1e-5 instead of bit-exact.
        const run_result reference = single_process_run(dp * m);
        for (const auto schedule : {weft::sched::gpipe::kind, weft::sched::one_f_one_b::kind}) {
            INFO("pp " << pp << " dp " << dp << " " << weft::to_string(schedule));
            const auto result = train_steps(world, parallel_config({.pp = pp, .dp = dp, .microbatches = m,
                                                                    .schedule = schedule, .world_size = world.size()}));
            require_same_training(result, reference, dp == 1 ? 0 : 1e-5);
        }
    }
}

TEST_CASE("every schedule over MPI trains the same model as one process") {
    struct layout {
        schedule_kind schedule;
        int microbatches;
        int chunks;
    };
    const layout layouts[] = {
        {weft::sched::interleaved::kind, 4, 2}, {weft::sched::looped_bfs::kind, 4, 2},
        {weft::sched::zb_h1::kind, 4, 1},       {weft::sched::zb_h2::kind, 8, 1},
        {weft::sched::zbv::kind, 8, 2},         {weft::sched::dualpipev::kind, 8, 2},
        {weft::sched::zb_auto::kind, 8, 1},
    };
    auto world = weft::comm::mpi::world();
    std::map<int, run_result> references;
    for (const int pp : {2, 4}) {
        if (world.size() % pp != 0) continue;
        auto pipeline = world.split(world.rank() / pp, world.rank());
        for (const auto& l : layouts) {
            INFO(weft::to_string(l.schedule) << " pp " << pp << " m " << l.microbatches << " v " << l.chunks);
            if (!references.contains(l.microbatches)) references[l.microbatches] = single_process_run(l.microbatches);
            const auto result = train_steps(pipeline, parallel_config({.pp = pp, .microbatches = l.microbatches,
                                                                       .chunks = l.chunks, .schedule = l.schedule,
                                                                       .world_size = pp}));
            require_same_training(result, references[l.microbatches], 1e-5);
        }
    }
}
