// Every schedule weft generates, run by the engine on the in-process backend: it
// trains the same model as one process, holds the activations the simulator says it
// holds, and reports a measured bubble.
#include "training_run.hpp"

#include "posting_order_comm.hpp"
#include "rendezvous_comm.hpp"

#include <algorithm>
#include <array>
#include <type_traits>

#include "weft/sched/csv.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/sched/simulate.hpp"

using weft::parallel_config;
using weft::schedule_kind;
using namespace weft_test;

namespace {

struct layout {
    schedule_kind schedule;
    int pp;
    int microbatches;
    int chunks;
};

// Each schedule at two pipeline depths, with sizes that meet its preconditions.
std::vector<layout> every_schedule() {
    std::vector<layout> out;
    for (const int p : {2, 4}) {
        out.push_back({weft::sched::gpipe::kind, p, 4, 1});
        out.push_back({weft::sched::one_f_one_b::kind, p, 4, 1});
        out.push_back({weft::sched::interleaved::kind, p, 4, 2});
        out.push_back({weft::sched::looped_bfs::kind, p, 4, 2});
        out.push_back({weft::sched::interleaved_zb::kind, p, 4, 2});
        out.push_back({weft::sched::zb_h1::kind, p, 4, 1});
        out.push_back({weft::sched::zb_h2::kind, p, 8, 1});
        out.push_back({weft::sched::zbv::kind, p, 8, 2});
        out.push_back({weft::sched::v_half::kind, p, 8, 2});
        out.push_back({weft::sched::v_min::kind, p, 8, 2});
        out.push_back({weft::sched::dualpipev::kind, p, 8, 2});
        out.push_back({weft::sched::zb_auto::kind, p, 8, 1});
    }
    return out;
}

parallel_config config_of(const layout& l) {
    return parallel_config({.pp = l.pp, .microbatches = l.microbatches, .chunks = l.chunks, .schedule = l.schedule,
                            .world_size = l.pp});
}


}  // namespace

// Adding a schedule to the list without a layout above fails here.
TEST_CASE("every listed schedule has a layout in these tests") {
    const auto layouts = every_schedule();
    weft::for_each_type(weft::sched::schedule_list{}, [&layouts]<class S>(std::type_identity<S>) {
        INFO(S::name);
        CHECK(std::any_of(layouts.begin(), layouts.end(), [](const layout& l) { return l.schedule == S::kind; }));
    });
}

TEST_CASE("every schedule trains the same model as one process") {
    std::map<int, run_result> references;
    for (const auto& l : every_schedule()) {
        DYNAMIC_SECTION(weft::to_string(l.schedule) << " pp " << l.pp << " m " << l.microbatches << " v " << l.chunks) {
            if (!references.contains(l.microbatches)) references[l.microbatches] = single_process_run(l.microbatches);
            const auto ranks = run_local(config_of(l));
            std::size_t tensors = 0;
            for (const auto& rank : ranks) {
                // Split backward may add micro-batches' weight gradients in another order.
                require_same_training(rank, references[l.microbatches], 1e-5);
                tensors += rank.parameters.size();
            }
            CHECK(tensors == references[l.microbatches].parameters.size());
        }
    }
}

// NCCL pairs messages per peer in posting order, without tags. Between two ranks, ZB-V and
// DualPipeV (and interleaved, when p does not divide m) post a gradient and an activation in
// one order and receive them in the other, so over one channel they would swap (same-sized)
// buffers and train wrongly; the engine gives each route its own communicator.
TEST_CASE("every schedule trains the same over a communicator that matches messages in posting order") {
    using untagged = weft_test::posting_order<weft::comm::local>;
    for (const auto& l : every_schedule()) {
        DYNAMIC_SECTION(weft::to_string(l.schedule) << " pp " << l.pp << " m " << l.microbatches << " v " << l.chunks) {
            const auto tagged = run_local(config_of(l));
            std::vector<run_result> ranks(static_cast<std::size_t>(l.pp));
            weft::comm::local::run(l.pp, [&](weft::comm::local& world) {
                untagged untagged_world(world.split(0, world.rank()));
                ranks[static_cast<std::size_t>(world.rank())] = train_steps(untagged_world, config_of(l));
            });
            for (std::size_t r = 0; r < ranks.size(); ++r) {
                INFO("pipeline rank " << r);
                require_same_training(ranks[r], tagged[r], 0);
            }
        }
    }
}

// comm::nccl launches a rank's posted sends and receives as one group when one of them is
// waited for, and an NCCL send waits for its receive to be launched on the peer. A program
// whose ranks wait in an order that leaves each one's group needing a group the other has
// not launched would hang the GPUs' streams; over rendezvous<local> it is a deadlock that
// local::run reports. Every schedule must run, with data parallelism too, and train the same.
TEST_CASE("every schedule runs without a deadlock under NCCL's batched rendezvous sends and receives") {
    using nccl_like = weft_test::rendezvous<weft::comm::local>;
    std::vector<parallel_config> configs;
    for (const auto& l : every_schedule()) configs.push_back(config_of(l));
    // Data parallelism: the gradients' all-reduces start on the data group beside the pipeline.
    configs.push_back(parallel_config({.pp = 2, .dp = 2, .microbatches = 4, .schedule = weft::sched::one_f_one_b::kind,
                                       .world_size = 4}));
    configs.push_back(parallel_config(
        {.pp = 2, .dp = 2, .microbatches = 4, .chunks = 2, .schedule = weft::sched::zbv::kind, .world_size = 4}));
    for (const auto& config : configs) {
        DYNAMIC_SECTION(weft::to_string(config.schedule()) << " pp " << config.pp() << " dp " << config.dp() << " m "
                                                           << config.microbatches() << " v " << config.chunks()) {
            const auto tagged = run_local(config);
            std::vector<run_result> ranks(static_cast<std::size_t>(config.world_size()));
            std::vector<long long> groups(ranks.size());
            weft::comm::local::run(config.world_size(), [&](weft::comm::local& world) {
                // A group waits this long before it is called a deadlock: a run that works
                // takes milliseconds.
                nccl_like nccl_world(world.split(0, world.rank()), std::chrono::seconds(5));
                ranks[static_cast<std::size_t>(world.rank())] = train_steps(nccl_world, config);
                groups[static_cast<std::size_t>(world.rank())] = nccl_world.groups_launched();
            });
            for (std::size_t r = 0; r < ranks.size(); ++r) {
                INFO("rank " << r);
                require_same_training(ranks[r], tagged[r], 0);
                CHECK(groups[r] >= steps);  // the pipeline's messages went in groups
            }
        }
    }
}

// The model itself: an exchange whose two sends are each waited for alone deadlocks, as it
// would on GPUs (each rank's group holds only its send); posted together with the receives,
// it runs.
TEST_CASE("the rendezvous model deadlocks where NCCL's streams would hang and only there") {
    using nccl_like = weft_test::rendezvous<weft::comm::local>;
    const auto exchange = [](bool post_both_first) {
        std::array<std::array<float, 4>, 2> received{};
        weft::comm::local::run(2, [&](weft::comm::local& world) {
            nccl_like nccl_world(world.split(0, world.rank()), std::chrono::milliseconds(300));
            const int peer = 1 - world.rank();
            const std::array<float, 4> out{1.0f + static_cast<float>(world.rank()), 2, 3, 4};
            auto& in = received[static_cast<std::size_t>(world.rank())];
            auto send = nccl_world.isend(std::as_bytes(std::span<const float>(out)), peer, 0);
            if (!post_both_first) send.wait();
            auto receive = nccl_world.irecv(std::as_writable_bytes(std::span<float>(in)), peer, 0);
            send.wait();
            receive.wait();
        });
        return received;
    };
    const auto received = exchange(true);
    CHECK(received[0][0] == 2.0f);  // from rank 1
    CHECK(received[1][0] == 1.0f);
    CHECK_THROWS_WITH(exchange(false), Catch::Contains("deadlock"));
}

TEST_CASE("the engine holds exactly the activations the simulator predicts") {
    for (const auto& l : every_schedule()) {
        DYNAMIC_SECTION(weft::to_string(l.schedule) << " pp " << l.pp << " v " << l.chunks) {
            const auto ranks = run_local(config_of(l));
            const auto program = weft::sched::generate(
                l.schedule, weft::sched::schedule_params{.ranks = l.pp, .microbatches = l.microbatches, .chunks = l.chunks});
            const auto simulated = weft::sched::simulate(program);
            for (int r = 0; r < l.pp; ++r) {
                INFO("pipeline rank " << r);
                // The simulator counts a chunk's micro-batch as 1/v of the rank's share.
                CHECK(static_cast<double>(ranks[r].peak_stashed) == Approx(simulated.peak_activations[r] * l.chunks));
            }
        }
    }
}

TEST_CASE("a program read from PyTorch's CSV runs and trains the same model") {
    const auto generated = weft::sched::generate(weft::sched::zb_h1::kind,
                                                 weft::sched::schedule_params{.ranks = 2, .microbatches = 4});
    const auto from_csv = weft::sched::from_csv(weft::sched::to_csv(generated));
    const run_result reference = single_process_run(4);
    std::vector<run_result> ranks(2);
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        ranks[static_cast<std::size_t>(world.rank())] =
            train_steps(world, parallel_config({.pp = 2, .microbatches = 4, .schedule = weft::sched::zb_h1::kind,
                                                .world_size = 2}),
                        &from_csv);
    });
    for (const auto& rank : ranks) require_same_training(rank, reference, 1e-5);
}

TEST_CASE("the step log reports the measured bubble") {
    // Catch2's assertions are not thread-safe: the ranks record, the test thread checks.
    struct observed {
        weft::train::step_stats stats;
        double idle = -1;
    };
    std::vector<observed> ranks(2);
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu> engine(
            world, parallel_config({.pp = 2, .microbatches = 4, .schedule = weft::sched::gpipe::kind, .world_size = 2}),
            test_model(), test_options());
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        const auto stats = engine.step(data.batch(0, batch_size));
        ranks[static_cast<std::size_t>(world.rank())] = {stats, engine.parts().idle_fraction()};
    });
    for (const auto& rank : ranks) {
        CHECK(rank.stats.bubble >= 0.0);
        CHECK(rank.stats.bubble < 1.0);
        CHECK(rank.idle >= 0.0);
        CHECK_THAT(weft::train::format_step(rank.stats), Catch::Contains("| bubble "));
    }
    // The first stage waits for its whole backward to come back: it must have idled.
    CHECK(ranks[0].idle > 0.0);
    // Every rank reports the same mean.
    CHECK(ranks[0].stats.bubble == ranks[1].stats.bubble);
}

TEST_CASE("a supplied program must fit the layout") {
    const auto program = weft::sched::generate(weft::sched::one_f_one_b::kind,
                                               weft::sched::schedule_params{.ranks = 2, .microbatches = 4});
    CHECK_THROWS_WITH(weft::comm::local::run(4, [&](weft::comm::local& world) {
                          weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local,
                                              weft::exec::cpu>
                              engine(world, parallel_config({.pp = 4, .microbatches = 4, .world_size = 4}),
                                     test_model(), test_options(), program);
                      }),
                      Catch::Contains("program ranks = 2"));
}

TEST_CASE("a config without a schedule runs the first schedule of the engine's set") {
    using zb_h1_first = weft::sched::any_of<weft::sched::zb_h1, weft::sched::gpipe>;
    using engine_t = weft::train::engine<zb_h1_first, weft::shard::replicate, weft::comm::local, weft::exec::cpu>;
    struct observed {
        schedule_kind schedule;
        bool same_program = false;
    };
    std::vector<observed> ranks(2);
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        const engine_t unchosen(world, parallel_config({.pp = 2, .microbatches = 4, .world_size = 2}), test_model(),
                                test_options());
        const engine_t chosen(
            world, parallel_config({.pp = 2, .microbatches = 4, .schedule = weft::sched::zb_h1::kind, .world_size = 2}),
            test_model(), test_options());
        ranks[static_cast<std::size_t>(world.rank())] = {unchosen.config().schedule(),
                                                          unchosen.parts().program() == chosen.parts().program()};
    });
    for (const auto& rank : ranks) {
        CHECK(rank.schedule == weft::sched::zb_h1::kind);  // config() reports what runs
        CHECK(rank.same_program);
    }
    // The layout is checked against the schedule that runs: zb-h1 holds one stage per rank.
    const auto two_chunks = [](weft::comm::local& world) {
        const engine_t engine(world, parallel_config({.microbatches = 4, .chunks = 2}), test_model(), test_options());
    };
    CHECK_THROWS_WITH(weft::comm::local::run(1, two_chunks),
                      Catch::EndsWith("chunks = 2 is invalid: schedule zb-h1 runs one stage per rank; valid: 1"));
}
