// The engine over the in-process backend: every pipeline layout trains exactly the
// model one process trains, frees activations as the schedule allows, and rejects
// bad configurations with clear errors instead of crashing or hanging.
#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "training_run.hpp"
#include "weft/core/deferred_value.hpp"
#include "weft/shard/any_zero.hpp"

using weft::parallel_config;
using weft::schedule_kind;
using namespace weft_test;

TEST_CASE("the single-process engine equals the plain training loop") {
    require_same_training(single_process_run(4), plain_loop_run(), 1e-5);
}

TEST_CASE("every pipeline layout equals the single-process run bit for bit") {
    const int m = 4;
    const run_result reference = single_process_run(m);
    for (const int pp : {1, 2, 4}) {
        for (const auto schedule : {weft::sched::gpipe::kind, weft::sched::one_f_one_b::kind}) {
            DYNAMIC_SECTION("pp " << pp << " " << weft::to_string(schedule)) {
                const auto ranks = run_local(parallel_config({.pp = pp, .microbatches = m, .schedule = schedule,
                                                              .world_size = pp}));
                // Micro-batches are accumulated in the same order whatever the layout,
                // so not even the last bit may differ.
                for (const auto& rank : ranks) require_same_training(rank, reference, 0);
                // Together the ranks hold every tensor of the model exactly once.
                std::size_t tensors = 0;
                for (const auto& rank : ranks) tensors += rank.parameters.size();
                CHECK(tensors == reference.parameters.size());
            }
        }
    }
}

TEST_CASE("data parallel replicas train the same model as one process") {
    const run_result reference = single_process_run(4);
    for (const auto schedule : {weft::sched::gpipe::kind, weft::sched::one_f_one_b::kind}) {
        const auto ranks = run_local(parallel_config({.pp = 2, .dp = 2, .microbatches = 2, .schedule = schedule,
                                                      .world_size = 4}));
        for (const auto& rank : ranks) require_same_training(rank, reference, 1e-5);
    }
}

TEST_CASE("activations are freed as early as the schedule allows") {
    const int p = 4, m = 8;
    const auto gpipe = run_local(parallel_config({.pp = p, .microbatches = m, .schedule = weft::sched::gpipe::kind,
                                                  .world_size = p}));
    const auto one_f_one_b = run_local(parallel_config({.pp = p, .microbatches = m,
                                                        .schedule = weft::sched::one_f_one_b::kind, .world_size = p}));
    for (int r = 0; r < p; ++r) {
        INFO("pipeline rank " << r);
        CHECK(gpipe[r].peak_stashed == static_cast<std::size_t>(m));       // all forwards before any backward
        CHECK(one_f_one_b[r].peak_stashed == static_cast<std::size_t>(p - r));  // warm-up depth + 1
    }
}

TEST_CASE("bad configurations raise weft::error naming the problem, on every rank, without hanging") {
    using engine_t = weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu>;
    const auto try_config = [](int world_size, const weft::parallel_options& options,
                               weft::train::engine_options engine_options = test_options()) {
        weft::comm::local::run(world_size, [&](weft::comm::local& world) {
            engine_t engine(world, parallel_config(options), test_model(), engine_options);
        });
    };
    CHECK_THROWS_WITH(
        try_config(4, {.pp = 4, .microbatches = 2, .schedule = weft::sched::one_f_one_b::kind, .world_size = 4}),
        Catch::Contains("microbatches = 2") && Catch::Contains("1f1b"));
    CHECK_THROWS_WITH(try_config(4, {.pp = 2, .microbatches = 2, .world_size = 4}),
                      Catch::Contains("pp*dp*tp = 2"));
    // More ranks than take part (fewer would leave the others as spares).
    CHECK_THROWS_WITH(try_config(2, {.pp = 2, .dp = 2, .microbatches = 2, .world_size = 4}),
                      Catch::Contains("world_size = 4") && Catch::Contains("at most the ranks taking part, 2"));
    CHECK_THROWS_WITH(try_config(2, {.tp = 2, .microbatches = 2, .world_size = 2}), Catch::Contains("tp = 2"));
    CHECK_THROWS_WITH(try_config(1, {.zero_stage = 2}), Catch::Contains("zero_stage = 2"));
    CHECK_THROWS_WITH(try_config(1, {.microbatches = 3}), Catch::Contains("batch_size = 16"));
    CHECK_THROWS_WITH(try_config(1, {.microbatches = 0}), Catch::Contains("microbatches = 0"));
    CHECK_THROWS_WITH(try_config(4, {.pp = 4, .microbatches = 4, .world_size = 4}, {.batch_size = -4}),
                      Catch::Contains("batch_size = -4"));
    // More stages (4 ranks x 4 chunks) than the model's 8 units.
    CHECK_THROWS_WITH(try_config(4, {.pp = 4, .microbatches = 4, .chunks = 4,
                                     .schedule = weft::sched::interleaved::kind, .world_size = 4}),
                      Catch::Contains("stages = 16") && Catch::Contains("8 units"));
    // A schedule the engine was not compiled for.
    CHECK_THROWS_WITH(([] {
                          weft::comm::local::run(1, [](weft::comm::local& world) {
                              weft::train::engine<weft::sched::one_f_one_b, weft::shard::replicate,
                                                  weft::comm::local, weft::exec::cpu>
                                  engine(world, parallel_config({.schedule = weft::sched::gpipe::kind}), test_model(),
                                         test_options());
                          });
                      }()),
                      Catch::Contains("schedule = \"gpipe\"") && Catch::Contains("compiled for: 1f1b"));
}

TEST_CASE("a step rejects a batch of the wrong size") {
    weft::comm::local::run(1, [](weft::comm::local& world) {
        weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu> engine(
            world, parallel_config({.microbatches = 2}), test_model(), test_options());
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        CHECK_THROWS_WITH(engine.step(data.batch(0, 8)), Catch::Contains("batch rows = 8"));
    });
}

TEST_CASE("training makes the loss fall") {
    weft::comm::local::run(2, [](weft::comm::local& world) {
        weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu> engine(
            world, parallel_config({.pp = 2, .microbatches = 4, .world_size = 2}), test_model(),
            {.batch_size = 32, .optimizer = {.lr = 1e-2}});
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        double first = 0, last = 0;
        for (int step = 0; step < 60; ++step) {
            const double loss = engine.step(data.batch(step, 32)).loss;
            if (step < 5) first += loss;
            if (step >= 55) last += loss;
        }
        if (world.rank() == 0) CHECK(last < 0.7 * first);
    });
}

TEST_CASE("an uneven partition trains the same model and bad partitions are rejected") {
    const run_result reference = single_process_run(4);
    std::vector<run_result> ranks(2);
    auto options = test_options();
    options.partition = {2, 6};  // of the model's 8 units
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu> engine(
            world, parallel_config({.pp = 2, .microbatches = 4, .world_size = 2}), test_model(), options);
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        run_result result;
        for (int step = 0; step < steps; ++step)
            result.losses.push_back(engine.step(data.batch(step, batch_size)).loss);
        for (const int s : engine.parts().local_stages()) {
            const auto& stage = engine.parts().stage(s);
            for (const auto& info : stage.registry().entries())
                result.parameters[info.name].assign(
                    stage.parameters().begin() + static_cast<std::ptrdiff_t>(info.offset),
                    stage.parameters().begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
        }
        ranks[static_cast<std::size_t>(world.rank())] = result;
    });
    for (const auto& rank : ranks) require_same_training(rank, reference, 0);
    // Stage 0 holds the first 2 units: its rank holds input.* and blocks.0.* only.
    CHECK(ranks[0].parameters.contains("blocks.0.fc1.weight"));
    CHECK_FALSE(ranks[0].parameters.contains("blocks.1.fc1.weight"));
    CHECK_THROWS_WITH(weft::nn::partition_from_counts({2, 5}, 8, 2), Catch::Contains("partition total = 7"));
    CHECK_THROWS_WITH(weft::nn::partition_from_counts({8}, 8, 2), Catch::Contains("partition size = 1"));
    CHECK_THROWS_WITH(weft::nn::partition_from_counts({0, 8}, 8, 2), Catch::Contains("partition entry = 0"));
}

TEST_CASE("the engine holds its backend object and every stage computes on it") {
    // Per rank: its local stages, and how many of them compute on the engine's backend.
    // Checked after the ranks join: Catch's assertions are not thread-safe.
    std::array<std::pair<std::size_t, std::size_t>, 2> seen{};
    weft::comm::local::run(2, [&seen](weft::comm::local& world) {
        weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu> engine(
            world, parallel_config({.pp = 2, .microbatches = 4, .chunks = 2, .schedule = weft::sched::interleaved::kind,
                                    .world_size = 2}),
            test_model(), test_options());
        auto& [stages, on_backend] = seen[static_cast<std::size_t>(world.rank())];
        stages = engine.parts().local_stages().size();
        for (const int s : engine.parts().local_stages())
            if (&engine.parts().stage(s).backend() == &engine.backend()) ++on_backend;
    });
    for (const auto& [stages, on_backend] : seen) {
        CHECK(stages == 2);
        CHECK(on_backend == stages);
    }
}

namespace {

// exec::cpu without its optimizer kernels: the engine then steps with the host's code.
struct host_step_cpu : weft::exec::cpu {
    void adamw_update() = delete;
    void summarize_gradients() = delete;
};
static_assert(weft::exec::optimizer_kernels<weft::exec::cpu>);
static_assert(weft::compute_backend<host_step_cpu> && !weft::exec::optimizer_kernels<host_step_cpu>);

// exec::cpu counting its optimizer kernels' calls (over all rank threads).
struct counting_optimizer_cpu : weft::exec::cpu {
    static inline std::atomic<int> adamw_calls{0}, sgd_calls{0};
    template <class... Args>
    void adamw_update(Args&&... args) const {
        ++adamw_calls;
        weft::exec::cpu::adamw_update(std::forward<Args>(args)...);
    }
    template <class... Args>
    void sgd_update(Args&&... args) const {
        ++sgd_calls;
        weft::exec::cpu::sgd_update(std::forward<Args>(args)...);
    }
};
static_assert(weft::exec::optimizer_kernels<counting_optimizer_cpu>);

// Losses, gradient norms and final parameters of every rank of a pp=2 x dp=2 ZeRO-1 run with
// clipping (the gradient scale), on Backend.
template <class Backend>
std::vector<std::pair<std::vector<double>, std::vector<float>>> clipped_zero_run() {
    const auto config = parallel_config(
        {.pp = 2, .dp = 2, .zero_stage = 1, .microbatches = 2, .schedule = weft::sched::gpipe::kind, .world_size = 4});
    auto options = test_options();
    options.grad_clip = 0.05;
    std::vector<std::pair<std::vector<double>, std::vector<float>>> ranks(4);
    weft::comm::local::run(4, [&](weft::comm::local& world) {
        weft::train::engine<all_schedules, weft::shard::any_zero, weft::comm::local, Backend> engine(
            world, config, test_model(), options, Backend{});
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        auto& [norms_and_losses, params] = ranks[static_cast<std::size_t>(world.rank())];
        for (int step = 0; step < steps; ++step) {
            const auto stats = engine.step(data.batch(step, batch_size));
            norms_and_losses.push_back(stats.loss);
            norms_and_losses.push_back(stats.grad_norm);
        }
        for (const int s : engine.parts().local_stages()) {
            const auto p = engine.parts().stage(s).parameters();
            params.insert(params.end(), p.begin(), p.end());
        }
    });
    return ranks;
}

}  // namespace

TEST_CASE("a backend without optimizer kernels steps on the host with the same numbers") {
    // exec::cpu's optimizer kernels are the host's code: the two paths of the engine's step
    // (the backend's kernels, the host's fallback) must agree bit for bit, clipping included.
    const auto with_kernels = clipped_zero_run<weft::exec::cpu>();
    const auto on_host = clipped_zero_run<host_step_cpu>();
    for (std::size_t r = 0; r < with_kernels.size(); ++r) {
        INFO("rank " << r);
        CHECK(with_kernels[r].first == on_host[r].first);
        CHECK(with_kernels[r].second == on_host[r].second);
        CHECK(with_kernels[r].first[1] > 0.05);  // the first step's norm is clipped
    }
}

TEST_CASE("the engine steps each optimizer through the backend's kernel") {
    // Both optimizers' updates run where the backend keeps the state (exec::cuda: on the
    // GPU), one call per decay range of each stage: none of them falls back to the host.
    using weft::optim::optimizer_kind;
    for (const optimizer_kind kind : {optimizer_kind::adamw, optimizer_kind::sgd}) {
        INFO(weft::optim::to_string(kind));
        counting_optimizer_cpu::adamw_calls = 0;
        counting_optimizer_cpu::sgd_calls = 0;
        auto options = test_options();
        options.optimizer = {.kind = kind, .lr = 1e-2, .weight_decay = 0.1, .momentum = 0.9};
        weft::comm::local::run(2, [&](weft::comm::local& world) {
            weft::train::engine<all_schedules, weft::shard::any_zero, weft::comm::local, counting_optimizer_cpu> engine(
                world,
                parallel_config({.pp = 1, .dp = 2, .zero_stage = 1, .microbatches = 2,
                                 .schedule = weft::sched::gpipe::kind, .world_size = 2}),
                test_model(), options, counting_optimizer_cpu{});
            const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
            for (int step = 0; step < 2; ++step) static_cast<void>(engine.step(data.batch(step, batch_size)));
        });
        const int used = kind == optimizer_kind::adamw ? counting_optimizer_cpu::adamw_calls.load()
                                                       : counting_optimizer_cpu::sgd_calls.load();
        const int other = kind == optimizer_kind::adamw ? counting_optimizer_cpu::sgd_calls.load()
                                                        : counting_optimizer_cpu::adamw_calls.load();
        CHECK(used >= 2 * 2);  // two ranks, two steps, at least one range each
        CHECK(other == 0);
    }
}

namespace {

// exec::cpu whose loss is a deferred value, as exec::cuda's (exec::deferred_loss_kernels).
// Per rank thread it counts the losses it handed out and the backward kernels it ran, and
// each read of a loss records both counts then.
struct deferral_counts {
    int losses = 0;
    int backward_kernels = 0;
    bool operator==(const deferral_counts&) const = default;
};
struct deferring_cpu : weft::exec::cpu {
    static inline thread_local deferral_counts issued{};
    static inline thread_local std::vector<deferral_counts> at_reads;

    [[nodiscard]] weft::deferred_value<float> cross_entropy_deferred(const matrix& logits,
                                                                     std::span<const std::int32_t> labels, float scale,
                                                                     matrix& dlogits) const {
        ++issued.losses;
        const float loss = weft::exec::cpu::cross_entropy(logits, labels, scale, dlogits);
        return weft::deferred_value<float>::when_read([loss] {
            at_reads.push_back(issued);
            return loss;
        });
    }
    template <class... Args>
    decltype(auto) linear_backward_input(Args&&... args) const {
        ++issued.backward_kernels;
        return weft::exec::cpu::linear_backward_input(std::forward<Args>(args)...);
    }
    template <class... Args>
    decltype(auto) linear_backward_weight(Args&&... args) const {
        ++issued.backward_kernels;
        return weft::exec::cpu::linear_backward_weight(std::forward<Args>(args)...);
    }
};
static_assert(weft::exec::deferred_loss_kernels<deferring_cpu> &&
              !weft::exec::deferred_loss_kernels<weft::exec::cpu>);

// Per rank of a pp=2 1F1B run over Backend: each step's loss, and (on deferring_cpu) whether
// every loss of every step was read after the step's last backward kernel and last loss.
struct deferral_run {
    std::vector<double> losses;
    int reads = 0;
    bool read_after_the_step = true;
};

template <class Backend>
std::array<deferral_run, 2> run_deferral(int microbatches) {
    std::array<deferral_run, 2> ranks;
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        weft::train::engine<all_schedules, weft::shard::replicate, weft::comm::local, Backend> engine(
            world, parallel_config({.pp = 2, .microbatches = microbatches, .schedule = weft::sched::one_f_one_b::kind,
                                    .world_size = 2}),
            test_model(), test_options(), Backend{});
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        deferral_run& mine = ranks[static_cast<std::size_t>(world.rank())];
        for (int step = 0; step < 3; ++step) {
            if constexpr (std::same_as<Backend, deferring_cpu>) deferring_cpu::at_reads.clear();
            mine.losses.push_back(engine.step(data.batch(step, batch_size)).loss);
            if constexpr (std::same_as<Backend, deferring_cpu>) {
                // Nothing of the step ran after any read: every read saw the step's final counts.
                for (const auto& seen : deferring_cpu::at_reads)
                    mine.read_after_the_step = mine.read_after_the_step && seen == deferring_cpu::issued;
                mine.reads += static_cast<int>(deferring_cpu::at_reads.size());
            }
        }
    });
    return ranks;
}

}  // namespace

TEST_CASE("the engine reads a deferred loss once the step's actions are queued, with the same numbers") {
    // exec::cuda's loss stays on the GPU until it is read: read at every micro-batch, the host
    // would stop the device's queue there; read after the step's last action, it stops it once.
    constexpr int microbatches = 4;
    const auto plain = run_deferral<weft::exec::cpu>(microbatches);
    const auto deferred = run_deferral<deferring_cpu>(microbatches);
    for (std::size_t r = 0; r < 2; ++r) {
        INFO("pipeline rank " << r);
        CHECK(deferred[r].losses == plain[r].losses);  // bit for bit: the same sum in the same order
        CHECK(deferred[r].read_after_the_step);
    }
    CHECK(deferred[0].reads == 0);                  // the first stage computes no loss
    CHECK(deferred[1].reads == 3 * microbatches);  // each of three steps reads each micro-batch's once
    CHECK(plain[1].losses[0] > 0.0);
}
