// shard::stage_state on local threads: for every ZeRO stage, one step on a stage's flat
// buffers gives the same parameters as plain data parallelism, bit for bit (local sums
// in rank order either way), and holds the memory its formula says.
#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <vector>

#include "weft/comm/local.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/shard/stage_state.hpp"
#include "weft/shard/zero_memory.hpp"

namespace {

// A stand-in stage: two tensors (one decays, one does not) of 11 elements in all, so
// that 4 ranks get ranges of 3 with one padding element.
weft::nn::flat_parameters<float> toy_stage() {
    weft::nn::parameter_registry registry;
    registry.add("w", {3, 3});
    registry.add("b", {2});
    weft::nn::flat_parameters<float> stage(std::move(registry));
    auto p = stage.parameters();
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.1f * float(i + 1);
    return stage;
}

struct outcome {
    std::vector<float> parameters;
    weft::shard::memory_figures between_steps, peak;
    std::size_t optimizer_elements = 0;
};

// Two steps of AdamW on gradients that differ per rank, under ZeRO stage `zero`.
std::vector<outcome> run(int zero, int ranks) {
    std::vector<outcome> out(static_cast<std::size_t>(ranks));
    weft::comm::local::run(ranks, [&](weft::comm::local& group) {
        auto stage = toy_stage();
        weft::optim::adamw adamw({.lr = 0.01, .weight_decay = 0.1});
        weft::shard::stage_state<float, weft::comm::local> state(stage, group, zero, /*bucket_elements=*/4);
        for (int step = 0; step < 2; ++step) {
            state.begin_step();
            state.start_unshard();
            state.finish_unshard();
            auto g = stage.gradients();
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * float((group.rank() + 1) * (i + 2) + step);
            state.start_reduce();
            state.reshard();
            state.finish_reduce();
            state.step([&](std::span<float> p, std::span<const float> grads, std::size_t offset) {
                adamw.step(p, grads, stage.registry(), offset);
            });
        }
        auto& o = out[static_cast<std::size_t>(group.rank())];
        o.between_steps = state.held_now();
        o.peak = state.peak();
        o.optimizer_elements = adamw.state_elements();
        state.with_full_parameters([&] { o.parameters.assign(stage.parameters().begin(), stage.parameters().end()); });
    });
    return out;
}

}  // namespace

TEST_CASE("every ZeRO stage steps like plain data parallelism, bit for bit", "[shard]") {
    const int ranks = GENERATE(1, 2, 4);
    const auto replicated = run(0, ranks);
    for (int zero = 1; zero <= 3; ++zero) {
        INFO("zero " << zero << ", " << ranks << " ranks");
        const auto sharded = run(zero, ranks);
        for (int r = 0; r < ranks; ++r) CHECK(sharded[std::size_t(r)].parameters == replicated[0].parameters);
    }
    // And the step did something: the replicas agree, and parameters moved from their start.
    for (int r = 1; r < ranks; ++r) CHECK(replicated[std::size_t(r)].parameters == replicated[0].parameters);
    CHECK(replicated[0].parameters[0] != 0.1f);
}

TEST_CASE("stage_state holds what zero_memory_of says", "[shard]") {
    const int ranks = GENERATE(2, 4);
    for (int zero = 0; zero <= 3; ++zero) {
        const auto outcomes = run(zero, ranks);
        for (int r = 0; r < ranks; ++r) {
            INFO("zero " << zero << ", rank " << r << " of " << ranks);
            const auto expected = weft::shard::zero_memory_of(zero, 11, ranks, r, 2, sizeof(float));
            const auto& o = outcomes[std::size_t(r)];
            CHECK(o.between_steps.parameters == expected.between_steps.parameters);
            CHECK(o.between_steps.gradients == expected.between_steps.gradients);
            CHECK(o.optimizer_elements * sizeof(float) == expected.between_steps.optimizer_state);
            CHECK(o.peak.parameters == expected.peak.parameters);
            CHECK(o.peak.gradients == expected.peak.gradients);
        }
    }
}

TEST_CASE("a ZeRO-3 stage used without UNSHARD is an error, not a read of freed memory", "[shard]") {
    std::string message;
    std::atomic<bool> released{true};
    try {
        weft::comm::local::run(2, [&](weft::comm::local& group) {
            auto stage = toy_stage();
            weft::shard::stage_state<float, weft::comm::local> state(stage, group, 3);
            if (!stage.parameters().empty()) released = false;
            state.begin_step();
            state.finish_unshard();
        });
    } catch (const weft::error& e) {
        message = e.what();
    }
    CHECK(released);
    CHECK_THAT(message, Catch::Matchers::Contains("UNSHARD"));
}
