// The engine over a communicator whose waits are stream-ordered, as comm::nccl's are: its
// wait() does not make a result readable by the host, only by the kernels after it. The CPU
// model in stream_ordered.hpp holds a device result back until a kernel or a
// synchronize() runs, so an engine that read communicated training state on the host
// without completing it for the host first would read stale gradients or parameters here
// and train differently. Every layout must train bit for bit as over comm::local, and
// step() must return with nothing left in flight.
//
// Twice: with the model backend's optimizer kernels, the gradients' averaging is a
// stream-ordered kernel behind the reduction's wait, as on a GPU; without them, the host
// averages, sums and updates, and must complete the reductions for itself first. A third
// time with NCCL's batched, rendezvous sends and receives under the stream model
// (rendezvous_comm.hpp): the whole of comm::nccl's behaviour that threads can show. Most
// layouts train with AdamW; two with SGD (momentum, weight decay), whose kernel follows the
// averaging kernel on the stream as AdamW's does. A fourth time over a state memory that
// frees after queued work, as exec::cuda's does: RESHARD then frees without a wait.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>

#include <string>
#include <vector>

#include "rendezvous_comm.hpp"
#include "stream_ordered.hpp"
#include "training_run.hpp"
#include "weft/shard/any_zero.hpp"

using namespace weft_test;
using weft::parallel_config;

namespace {

// stream_ordered_cpu without optimizer kernels (exec::optimizer_kernels): the step after
// backward runs on the host. Declaring the names hides the base's kernels.
struct stream_ordered_cpu_without_optimizer_kernels : stream_ordered_cpu {
    void scale() = delete;
    void adamw_update() = delete;
    void sgd_update() = delete;
    void summarize_gradients() = delete;
};
static_assert(weft::exec::optimizer_kernels<stream_ordered_cpu>);
static_assert(!weft::exec::optimizer_kernels<stream_ordered_cpu_without_optimizer_kernels>);

enum class run_on {
    cpu_reference,
    stream_ordered_kernels,
    stream_ordered_host_step,
    nccl_model,
    not_joining,
    fencing_frees
};

const char* name_of(run_on backend) {
    switch (backend) {
        case run_on::cpu_reference: return "comm::local";
        case run_on::stream_ordered_kernels: return "optimizer kernels";
        case run_on::stream_ordered_host_step: return "the step on the host";
        case run_on::nccl_model: return "optimizer kernels, NCCL's sends and receives";
        case run_on::not_joining: return "optimizer kernels, a communicator that does not join the compute stream";
        case run_on::fencing_frees: return "optimizer kernels, a state memory that frees after queued work";
    }
    return "?";
}

struct rank_record {
    std::vector<double> losses;      // each step's loss, then its gradient norm
    std::vector<float> parameters;   // every local stage's, gathered whole
    double evaluation = 0;           // evaluate() after the steps
    int steps_left_in_flight = 0;    // steps after which the compute stream still held work
    int synchronizations = 0;        // the backend's, over the steps
    // REDUCE_GRAD and UNSHARD actions of this rank's program, and under plain data parallelism
    // the layers whose reduction starts as their gradients are final (one per unit)
    int stage_wide_starts = 0;
    int reshards = 0;                // RESHARD actions of this rank's program
};

// AdamW (test_options'), or SGD with momentum and weight decay: each has its own kernel.
template <class Comm, class Backend>
rank_record train(Comm& world, const parallel_config& config, double grad_clip, weft::optim::optimizer_kind kind) {
    auto options = test_options();
    options.grad_clip = grad_clip;
    if (kind == weft::optim::optimizer_kind::sgd)
        options.optimizer = {.kind = kind, .lr = 1e-2, .weight_decay = 0.1, .momentum = 0.9};
    options.bucket_elements = 100;  // several buckets per stage: several waits
    weft::train::engine<all_schedules, weft::shard::any_zero, Comm, Backend> engine(world, config, test_model(),
                                                                                   options, Backend{});
    const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
    rank_record record;
    for (const auto& a : engine.parts().program().ranks[static_cast<std::size_t>(engine.parts().coordinates().pp_index)]) {
        if (a.kind == weft::sched::action_kind::REDUCE_GRAD || a.kind == weft::sched::action_kind::UNSHARD)
            ++record.stage_wide_starts;
        if (a.kind == weft::sched::action_kind::RESHARD) ++record.reshards;
    }
    if (config.zero_stage() == 0 && config.dp() > 1)
        for (const int s : engine.parts().local_stages()) {
            const auto units = engine.parts().stage(s).units();
            record.stage_wide_starts += units.last - units.first;
        }
    const int synchronized_before = stream_model::synchronizations();
    for (int step = 0; step < steps; ++step) {
        const auto stats = engine.step(data.batch(step, batch_size));
        record.losses.push_back(stats.loss);
        record.losses.push_back(stats.grad_norm);
        if (!stream_model::compute_stream().empty()) ++record.steps_left_in_flight;
    }
    record.synchronizations = stream_model::synchronizations() - synchronized_before;
    record.evaluation = engine.evaluate(data.batch(steps, batch_size));
    engine.parts().with_full_parameters([&](int, const auto& stage) {
        const auto p = stage.parameters();
        record.parameters.insert(record.parameters.end(), p.begin(), p.end());
    });
    return record;
}

std::vector<rank_record> run(const parallel_config& config, double grad_clip, weft::optim::optimizer_kind kind,
                             run_on backend) {
    std::vector<rank_record> ranks(static_cast<std::size_t>(config.world_size()));
    weft::comm::local::run(config.world_size(), [&](weft::comm::local& world) {
        auto& mine = ranks[static_cast<std::size_t>(world.rank())];
        using ordered_comm = stream_ordered<weft::comm::local>;
        if (backend == run_on::cpu_reference) {
            mine = train<weft::comm::local, weft::exec::cpu>(world, config, grad_clip, kind);
            return;
        }
        if (backend == run_on::nccl_model) {
            using nccl_model = stream_ordered<rendezvous<weft::comm::local>>;
            nccl_model ordered(rendezvous<weft::comm::local>(world.split(0, world.rank())));
            mine = train<nccl_model, stream_ordered_cpu>(ordered, config, grad_clip, kind);
            return;
        }
        if (backend == run_on::not_joining) {
            using separate_comm = stream_ordered<weft::comm::local, false>;
            separate_comm separate(world.split(0, world.rank()));
            mine = train<separate_comm, stream_ordered_cpu>(separate, config, grad_clip, kind);
            return;
        }
        ordered_comm ordered(world.split(0, world.rank()));
        if (backend == run_on::fencing_frees)
            mine = train<ordered_comm, stream_ordered_cpu_fencing_frees>(ordered, config, grad_clip, kind);
        else if (backend == run_on::stream_ordered_kernels)
            mine = train<ordered_comm, stream_ordered_cpu>(ordered, config, grad_clip, kind);
        else
            mine = train<ordered_comm, stream_ordered_cpu_without_optimizer_kernels>(ordered, config, grad_clip, kind);
    });
    return ranks;
}

}  // namespace

TEST_CASE("the engine reads communicated state on the host only after completing it there") {
    using weft::optim::optimizer_kind;
    struct layout {
        int pp, dp, zero;
        double grad_clip;
        optimizer_kind optimizer = optimizer_kind::adamw;
    };
    const layout layouts[] = {{1, 2, 0, 0},
                              {1, 2, 1, 0},
                              {1, 2, 2, 0},
                              {1, 2, 3, 0},
                              {2, 2, 0, 0.05},
                              {2, 2, 1, 0.05},
                              {2, 2, 3, 0.05},
                              {1, 2, 0, 0, optimizer_kind::sgd},
                              {2, 2, 2, 0.05, optimizer_kind::sgd}};
    for (const auto& l : layouts) {
        DYNAMIC_SECTION("pp " << l.pp << " dp " << l.dp << " ZeRO-" << l.zero << " clip " << l.grad_clip << " "
                              << weft::optim::to_string(l.optimizer)) {
            const parallel_config config({.pp = l.pp, .dp = l.dp, .zero_stage = l.zero, .microbatches = 2,
                                          .schedule = weft::sched::one_f_one_b::kind,
                                          .world_size = l.pp * l.dp});
            const auto reference = run(config, l.grad_clip, l.optimizer, run_on::cpu_reference);
            for (const run_on backend :
                 {run_on::stream_ordered_kernels, run_on::stream_ordered_host_step, run_on::nccl_model,
                  run_on::fencing_frees}) {
                INFO(name_of(backend));
                stream_model::writes_into_freed_memory() = 0;
                const auto ordered = run(config, l.grad_clip, l.optimizer, backend);
                CHECK(stream_model::writes_into_freed_memory() == 0);
                for (std::size_t r = 0; r < reference.size(); ++r) {
                    INFO("rank " << r);
                    CHECK(ordered[r].losses == reference[r].losses);
                    CHECK(ordered[r].evaluation == reference[r].evaluation);
                    CHECK(ordered[r].parameters == reference[r].parameters);
                    CHECK(ordered[r].steps_left_in_flight == 0);
                }
            }
        }
    }
}

TEST_CASE("over a communicator that joins the compute stream, REDUCE_GRAD and UNSHARD start without a wait") {
    // comm::nccl orders each operation after the backend's queued kernels by itself, so the
    // engine starts the data-parallel reduction and ZeRO-3's gather while the GPU still
    // works, and the host goes on queueing the next actions. Over a communicator that does
    // not, it waits for the backend first. Either way the same numbers, bit for bit.
    struct layout {
        int pp, dp, zero;
    };
    for (const layout& l : {layout{1, 2, 0}, layout{2, 2, 1}, layout{2, 2, 3}}) {
        DYNAMIC_SECTION("pp " << l.pp << " dp " << l.dp << " ZeRO-" << l.zero) {
            const parallel_config config({.pp = l.pp, .dp = l.dp, .zero_stage = l.zero, .microbatches = 2,
                                          .schedule = weft::sched::one_f_one_b::kind, .world_size = l.pp * l.dp});
            const auto reference = run(config, 0, weft::optim::optimizer_kind::adamw, run_on::cpu_reference);
            const auto joining = run(config, 0, weft::optim::optimizer_kind::adamw, run_on::stream_ordered_kernels);
            const auto waiting = run(config, 0, weft::optim::optimizer_kind::adamw, run_on::not_joining);
            for (std::size_t r = 0; r < reference.size(); ++r) {
                INFO("rank " << r);
                CHECK(joining[r].losses == reference[r].losses);
                CHECK(waiting[r].losses == reference[r].losses);
                CHECK(joining[r].parameters == reference[r].parameters);
                CHECK(waiting[r].parameters == reference[r].parameters);
                // One wait fewer per REDUCE_GRAD, UNSHARD and layer reduction of every step.
                REQUIRE(joining[r].stage_wide_starts > 0);
                CHECK(waiting[r].synchronizations - joining[r].synchronizations ==
                      steps * joining[r].stage_wide_starts);
            }
        }
    }
}

TEST_CASE("over a state memory that frees after queued work, RESHARD frees without a wait") {
    // ZeRO-3's RESHARD frees the gathered parameters, which on a GPU queued kernels may still
    // read. exec::cuda's state memory fences a freed buffer and reuses it only after that work
    // (test_core_block_pool holds its pool to that), so the engine frees it as it is; over any
    // other memory it waits for the backend first. The model's fencing memory keeps a buffer
    // until the compute stream has run what was queued before its free. (The model runs its
    // kernels as they are called, so it cannot show a kernel reading freed memory; what it
    // shows is the wait gone and the numbers unchanged.)
    for (const int pp : {1, 2}) {
        DYNAMIC_SECTION("pp " << pp << " dp 2 ZeRO-3") {
            const parallel_config config({.pp = pp, .dp = 2, .zero_stage = 3, .microbatches = 2,
                                          .schedule = weft::sched::one_f_one_b::kind, .world_size = pp * 2});
            const auto reference = run(config, 0, weft::optim::optimizer_kind::adamw, run_on::cpu_reference);
            const auto waiting = run(config, 0, weft::optim::optimizer_kind::adamw, run_on::stream_ordered_kernels);
            stream_model::writes_into_freed_memory() = 0;
            const auto fencing = run(config, 0, weft::optim::optimizer_kind::adamw, run_on::fencing_frees);
            CHECK(stream_model::writes_into_freed_memory() == 0);
            for (std::size_t r = 0; r < reference.size(); ++r) {
                INFO("rank " << r);
                CHECK(fencing[r].losses == reference[r].losses);
                CHECK(fencing[r].parameters == reference[r].parameters);
                CHECK(fencing[r].steps_left_in_flight == 0);
                // One wait fewer per RESHARD of every step.
                REQUIRE(fencing[r].reshards > 0);
                CHECK(waiting[r].synchronizations - fencing[r].synchronizations == steps * fencing[r].reshards);
            }
        }
    }
}

namespace {

// exec::cpu taking a wait limit as exec::cuda does (exec::limited_waits), keeping what it got.
struct cpu_with_wait_limit : weft::exec::cpu {
    std::chrono::steady_clock::duration limit{};
    int rank = -1;
    int settings = 0;
    void set_wait_limit(std::chrono::steady_clock::duration l, int r) {
        limit = l;
        rank = r;
        ++settings;
    }
};
static_assert(weft::exec::limited_waits<cpu_with_wait_limit>);
static_assert(!weft::exec::limited_waits<weft::exec::cpu>);

}  // namespace

TEST_CASE("the engine limits its backend's waits to its communicator's timeout") {
    // Over comm::nccl the compute stream waits on the device for messages; a peer that never
    // sends would hold the backend's next host wait for ever, where the communicator's own
    // waits give up. The engine gives the backend the same limit, naming its world rank.
    const parallel_config config({.pp = 2, .dp = 1, .microbatches = 2, .schedule = weft::sched::one_f_one_b::kind,
                                  .world_size = 2});
    struct seen {
        std::chrono::steady_clock::duration limit{};
        int rank = -1;
        int settings = 0;
        double loss = 0;
    };
    std::vector<seen> ranks(2);
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        world.set_timeout(std::chrono::seconds(7));
        weft::train::engine<all_schedules, weft::shard::any_zero, weft::comm::local, cpu_with_wait_limit> engine(
            world, config, test_model(), test_options(), cpu_with_wait_limit{});
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        const double loss = engine.step(data.batch(0, batch_size)).loss;
        const auto& backend = engine.backend();
        ranks[static_cast<std::size_t>(world.rank())] = {backend.limit, backend.rank, backend.settings, loss};
    });
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        INFO("rank " << r);
        CHECK(ranks[r].limit == std::chrono::seconds(7));
        CHECK(ranks[r].rank == static_cast<int>(r));
        CHECK(ranks[r].settings == 1);
        CHECK(std::isfinite(ranks[r].loss));
    }
}
