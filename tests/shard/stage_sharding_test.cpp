// shard::stage_sharding on local threads, for each policy's specialization: one step on a
// stage's flat buffers gives the same parameters as plain data parallelism, bit for bit
// (local sums in rank order either way); any_zero runs exactly the typed policy's code; the
// tensors are held in each ZeRO stage's form and take the memory its formula says; and a
// policy refuses tensors in another ZeRO stage's form or a stage that is not its own.
#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/comm/local.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/shard/zero.hpp"
#include "weft/shard/zero_memory.hpp"

namespace {

using weft::comm::local;
using weft::shard::stage_tensors;

// A stand-in stage: two tensors (one decays, one does not) of 11 elements in all, so that 4
// ranks get ranges of 3 with one padding element.
stage_tensors<float> toy_stage() {
    weft::parameter_registry registry;
    registry.add("w", {3, 3});
    registry.add("b", {2});
    weft::nn::flat_parameters<float> tensors(std::move(registry));
    auto p = tensors.parameters();
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.1f * float(i + 1);
    return stage_tensors<float>(std::move(tensors));
}

// A name and a ZeRO stage, but no stage_sharding specialization: a tag without code.
struct tag_only {
    static constexpr std::string_view name = "tag_only";
    static constexpr int zero_stage = 0;
};

struct outcome {
    std::vector<float> parameters;
    weft::shard::memory_figures between_steps, peak;
    std::size_t optimizer_elements = 0;
    int zero_stage = -1;
};

// Two steps of AdamW on gradients that differ per rank, under `Policy` at ZeRO stage `zero`.
template <class Policy>
std::vector<outcome> run(int zero, int ranks) {
    std::vector<outcome> out(static_cast<std::size_t>(ranks));
    local::run(ranks, [&](local& group) {
        auto tensors = toy_stage();
        weft::optim::adamw adamw({.lr = 0.01, .weight_decay = 0.1});
        weft::shard::stage_sharding<Policy, float, local> sharding(tensors, group,
                                                                   {.zero_stage = zero, .bucket_elements = 4});
        for (int step = 0; step < 2; ++step) {
            sharding.begin_step();
            sharding.start_unshard();
            sharding.finish_unshard();
            auto g = tensors.full.gradients();
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * float((group.rank() + 1) * (i + 2) + step);
            sharding.start_reduce();
            sharding.reshard();
            sharding.finish_reduce();
            sharding.step([&](std::span<float> p, std::span<const float> grads, std::size_t offset) {
                adamw.step(p, grads, tensors.registry(), offset);
            });
        }
        auto& o = out[static_cast<std::size_t>(group.rank())];
        o.between_steps = sharding.held_now();
        o.peak = sharding.peak();
        o.optimizer_elements = adamw.state_elements();
        o.zero_stage = sharding.zero_stage();
        sharding.with_full_parameters(
            [&] { o.parameters.assign(tensors.full.parameters().begin(), tensors.full.parameters().end()); });
    });
    return out;
}

std::vector<outcome> run_typed(int zero, int ranks) {
    switch (zero) {
        case 0: return run<weft::shard::replicate>(0, ranks);
        case 1: return run<weft::shard::zero<1>>(1, ranks);
        case 2: return run<weft::shard::zero<2>>(2, ranks);
        default: return run<weft::shard::zero<3>>(3, ranks);
    }
}

}  // namespace

TEST_CASE("each policy selects its code by specialization; any_zero holds the typed one", "[shard]") {
    using weft::shard::any_zero;
    using weft::shard::replicate;
    using weft::shard::sharding_for;
    using weft::shard::stage_sharding;
    using weft::shard::zero;
    STATIC_REQUIRE(sharding_for<replicate, float, local>);
    STATIC_REQUIRE(sharding_for<zero<2>, double, local>);
    STATIC_REQUIRE(sharding_for<any_zero, float, local>);
    STATIC_REQUIRE_FALSE(std::is_same_v<stage_sharding<zero<2>, float, local>, stage_sharding<any_zero, float, local>>);
    // A typed policy's zero stage is a compile-time fact of its code, any_zero's a run-time one.
    STATIC_REQUIRE(stage_sharding<zero<3>, float, local>::zero_stage() == 3);
    STATIC_REQUIRE(stage_sharding<replicate, float, local>::zero_stage() == 0);
    // A tag with no specialization is a tag, not a policy with code.
    STATIC_REQUIRE(weft::shard::sharding<tag_only>);
    STATIC_REQUIRE_FALSE(sharding_for<tag_only, float, local>);
}

TEST_CASE("every ZeRO stage steps like plain data parallelism, bit for bit", "[shard]") {
    const int ranks = GENERATE(1, 2, 4);
    const auto replicated = run_typed(0, ranks);
    for (int zero = 1; zero <= 3; ++zero) {
        INFO("zero " << zero << ", " << ranks << " ranks");
        const auto sharded = run_typed(zero, ranks);
        for (int r = 0; r < ranks; ++r) CHECK(sharded[std::size_t(r)].parameters == replicated[0].parameters);
    }
    // And the step did something: the replicas agree, and parameters moved from their start.
    for (int r = 1; r < ranks; ++r) CHECK(replicated[std::size_t(r)].parameters == replicated[0].parameters);
    CHECK(replicated[0].parameters[0] != 0.1f);
}

TEST_CASE("any_zero runs the typed policy of the config's stage, with the same results and memory", "[shard]") {
    const int ranks = GENERATE(2, 4);
    for (int zero = 0; zero <= 3; ++zero) {
        INFO("zero " << zero << ", " << ranks << " ranks");
        const auto typed = run_typed(zero, ranks);
        const auto any = run<weft::shard::any_zero>(zero, ranks);
        for (int r = 0; r < ranks; ++r) {
            const auto& a = any[std::size_t(r)];
            const auto& t = typed[std::size_t(r)];
            CHECK(a.zero_stage == zero);
            CHECK(a.parameters == t.parameters);
            CHECK(a.between_steps == t.between_steps);
            CHECK(a.peak == t.peak);
        }
    }
}

TEST_CASE("stage_sharding holds what zero_memory_of says", "[shard]") {
    const int ranks = GENERATE(2, 4);
    for (int zero = 0; zero <= 3; ++zero) {
        const auto outcomes = run_typed(zero, ranks);
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

TEST_CASE("a policy brings whole tensors into its form and adopts only its own form", "[shard]") {
    // Catch's assertions are not thread-safe: each rank records, the checks run after.
    struct seen {
        int zero_stage = -1;
        bool holds_parameters = true, holds_gradients = true;
        std::size_t range_size = 0, range_offset = 0;
        int adopted_stage = -1;
        std::string other_stage, replicate_refused, wrong_config;
    };
    std::vector<seen> ranks(2);
    auto message_of = [](auto&& make) -> std::string {
        try {
            make();
        } catch (const weft::error& e) {
            return e.what();
        }
        return "no error";
    };
    local::run(2, [&](local& group) {
        auto& me = ranks[std::size_t(group.rank())];
        auto tensors = toy_stage();
        {
            weft::shard::stage_sharding<weft::shard::zero<3>, float, local> sharding(tensors, group,
                                                                                     {.zero_stage = 3});
            me.zero_stage = tensors.zero_stage;
            me.holds_parameters = tensors.full.holds_parameters();
            me.holds_gradients = tensors.full.holds_gradients();
            me.range_size = tensors.parameter_range.size();
            me.range_offset = tensors.range.offset;
        }
        // The same tensors, already in ZeRO-3's form, are adopted by another ZeRO-3 sharding...
        weft::shard::stage_sharding<weft::shard::any_zero, float, local> again(tensors, group, {.zero_stage = 3});
        me.adopted_stage = again.zero_stage();
        // ...but not by a policy of another stage, which would misread them.
        me.other_stage = message_of([&] {
            weft::shard::stage_sharding<weft::shard::zero<1>, float, local> s(tensors, group, {.zero_stage = 1});
        });
        me.replicate_refused = message_of([&] {
            weft::shard::stage_sharding<weft::shard::replicate, float, local> s(tensors, group, {});
        });
        // A typed policy refuses a run configured for another stage.
        auto whole = toy_stage();
        me.wrong_config = message_of([&] {
            weft::shard::stage_sharding<weft::shard::zero<2>, float, local> s(whole, group, {.zero_stage = 1});
        });
    });
    for (std::size_t r = 0; r < 2; ++r) {
        INFO("rank " << r);
        const seen& me = ranks[r];
        CHECK(me.zero_stage == 3);
        CHECK_FALSE(me.holds_parameters);
        CHECK_FALSE(me.holds_gradients);
        CHECK(me.range_size == 6);  // 11 elements padded to 12, over 2 ranks
        CHECK(me.range_offset == 6 * r);
        CHECK(me.adopted_stage == 3);
        CHECK_THAT(me.other_stage, Catch::Matchers::Contains("ZeRO stage = 3") &&
                                       Catch::Matchers::Contains("must be 0 (whole) or 1"));
        CHECK_THAT(me.replicate_refused, Catch::Matchers::Contains("ZeRO stage = 3"));
        CHECK_THAT(me.wrong_config,
                   Catch::Matchers::Contains("zero_stage = 1") && Catch::Matchers::Contains("zero<2>"));
    }
}

TEST_CASE("a ZeRO-3 stage used without UNSHARD is an error, not a read of freed memory", "[shard]") {
    std::string message;
    std::atomic<bool> released{true};
    try {
        local::run(2, [&](local& group) {
            auto tensors = toy_stage();
            weft::shard::stage_sharding<weft::shard::zero<3>, float, local> sharding(tensors, group,
                                                                                     {.zero_stage = 3});
            if (!tensors.full.parameters().empty()) released = false;
            sharding.begin_step();
            sharding.finish_unshard();
        });
    } catch (const weft::error& e) {
        message = e.what();
    }
    CHECK(released);
    CHECK_THAT(message, Catch::Matchers::Contains("UNSHARD"));
}

// The overlap of the data-parallel reduction with the backward: ranges started as their
// gradients become final, in any order, and REDUCE_GRAD then starting the rest, average
// every element once, as one REDUCE_GRAD alone does; a range started twice or after
// REDUCE_GRAD is an error, not a gradient summed twice.
TEST_CASE("replicate reduces ranges started early and the rest at REDUCE_GRAD, each element once", "[shard]") {
    using weft::nn::gradient_range;
    const std::vector<std::vector<gradient_range>> orders{
        {}, {{0, 9}}, {{9, 11}, {2, 5}}, {{0, 3}, {3, 9}, {9, 11}}, {{5, 6}}};
    for (const auto& early : orders) {
        INFO("ranges started early: " << early.size());
        std::vector<std::vector<float>> reduced(3);
        local::run(3, [&](local& group) {
            auto tensors = toy_stage();
            weft::shard::stage_sharding<weft::shard::replicate, float, local> sharding(
                tensors, group, {.zero_stage = 0, .bucket_elements = 2});
            sharding.begin_step();
            auto g = tensors.full.gradients();
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = float((group.rank() + 1) * (i + 1));
            for (const auto r : early) sharding.start_reduce_range(r);
            sharding.start_reduce();
            sharding.finish_reduce();
            reduced[std::size_t(group.rank())].assign(g.begin(), g.end());
        });
        for (const auto& r : reduced) {
            REQUIRE(r.size() == 11);
            // Mean over ranks 1, 2, 3 of (rank + 1) * (i + 1): 2 (i + 1), exact in float.
            for (std::size_t i = 0; i < r.size(); ++i) CHECK(r[i] == 2.0f * float(i + 1));
        }
    }
    std::string twice, late;
    local::run(2, [&](local& group) {
        auto tensors = toy_stage();
        weft::shard::stage_sharding<weft::shard::replicate, float, local> sharding(tensors, group, {.zero_stage = 0});
        sharding.begin_step();
        sharding.start_reduce_range({0, 4});
        try {
            sharding.start_reduce_range({2, 6});
        } catch (const weft::error& e) {
            if (group.rank() == 0) twice = e.what();
        }
        sharding.start_reduce();
        try {
            sharding.start_reduce_range({6, 8});
        } catch (const weft::error& e) {
            if (group.rank() == 0) late = e.what();
        }
        sharding.finish_reduce();
    });
    CHECK_THAT(twice, Catch::Matchers::Contains("[2, 6)") && Catch::Matchers::Contains("overlaps [0, 4)"));
    CHECK_THAT(late, Catch::Matchers::Contains("after REDUCE_GRAD"));
}
