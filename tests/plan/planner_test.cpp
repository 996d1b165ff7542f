#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/gpt.hpp"
#include "weft/models/mlp.hpp"
#include "weft/plan/planner.hpp"
#include "weft/run/layout.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/engine.hpp"

namespace {

using gpt_engine = weft::engine<weft::sched::all_schedules, weft::shard::any_zero, weft::comm::local, weft::exec::cpu,
                                weft::models::gpt>;
using mlp_engine =
    weft::engine<weft::sched::all_schedules, weft::shard::any_zero, weft::comm::local, weft::exec::cpu>;

const weft::nn::gpt_config small_gpt{.num_layers = 2, .d_model = 32, .num_heads = 2, .vocab_size = 64, .seq_len = 16};
const weft::nn::mlp_config small_mlp{.input_dim = 16, .hidden_dim = 32, .num_blocks = 2, .num_classes = 4};
const weft::train::engine_options plan_options{.batch_size = 8};

// Measured-looking costs, not the unit costs: ties between layouts are then rare, so the
// comparison tests the order of times, not only the tie-break.
weft::plan::cost_model test_costs() {
    weft::plan::cost_model c;
    c.forward_ms_per_sample = 0.9;
    c.backward_input_ms_per_sample = 1.1;
    c.backward_weight_ms_per_sample = 0.7;
    c.optimizer_ns_per_element = 3;
    c.p2p_latency_us = 40;
    c.p2p_gbytes_per_s = 2;
    c.allreduce_latency_us = 60;
    c.allreduce_gbytes_per_s = 1;
    return c;
}

// Every combination of the default search space on 1..world ranks, each checked by the engine
// and simulated, none pruned (ZeRO > 0 with dp = 1 included).
template <class Engine>
std::vector<weft::plan::planned_layout> exhaustive(int world, const typename Engine::model_config& model,
                                                   const weft::plan::cost_model& costs) {
    std::vector<weft::plan::planned_layout> all;
    const auto kinds = weft::plan::engine_schedules<Engine>();
    for (int ranks = 1; ranks <= world; ++ranks)
        for (int pp = 1; pp <= ranks; ++pp)
            for (int dp = 1; dp <= ranks; ++dp)
                for (int tp = 1; tp <= ranks; ++tp) {
                    if (pp * dp * tp != ranks) continue;
                    for (int zero = 0; zero <= 3; ++zero)
                        for (std::size_t s = 0; s < kinds.size(); ++s)
                            for (int chunks : {1, 2})
                                for (int m : {1, 2, 4, 8, 16}) {
                                    const weft::plan::layout_candidate l{.world = ranks, .pp = pp, .dp = dp,
                                                                         .tp = tp, .zero = zero, .schedule = kinds[s],
                                                                         .chunks = chunks, .microbatches = m};
                                    try {
                                        auto priced = weft::plan::price_layout<Engine>(l, model, plan_options, costs);
                                        priced.schedule_index = static_cast<int>(s);
                                        all.push_back(priced);
                                    } catch (const weft::error&) {
                                    }
                                }
                }
    std::sort(all.begin(), all.end(), weft::plan::ranks_before);
    return all;
}

const weft::plan::planned_layout* first_within(const std::vector<weft::plan::planned_layout>& sorted,
                                               std::size_t budget) {
    for (const auto& p : sorted)
        if (p.estimate.peak_bytes <= budget) return &p;
    return nullptr;
}

template <class Engine>
void check_against_exhaustive(const typename Engine::model_config& model) {
    const auto costs = test_costs();
    for (int world = 1; world <= 4; ++world) {
        const auto all = exhaustive<Engine>(world, model, costs);
        REQUIRE(!all.empty());
        std::vector<std::size_t> peaks;
        for (const auto& p : all) peaks.push_back(p.estimate.peak_bytes);
        std::sort(peaks.begin(), peaks.end());
        // A budget every layout fits, one that half of them fit, and the tightest that any fits.
        for (const std::size_t budget : {peaks.back(), peaks[peaks.size() / 2], peaks.front()}) {
            INFO("world " << world << ", budget " << budget);
            const auto* expected = first_within(all, budget);
            REQUIRE(expected != nullptr);
            const auto chosen =
                weft::plan::choose_layout<Engine>(world, static_cast<long long>(budget), model, plan_options, costs);
            CHECK(chosen.layout.text() == expected->layout.text());
            CHECK(chosen.layout == expected->layout);
            CHECK(chosen.estimate.step_ms == Approx(expected->estimate.step_ms));
            CHECK(chosen.estimate.peak_bytes <= budget);
        }
    }
}

}  // namespace

TEST_CASE("the planner's choice equals an exhaustive search's on 1..4 ranks: GPT", "[plan]") {
    check_against_exhaustive<gpt_engine>(small_gpt);
}

TEST_CASE("the planner's choice equals an exhaustive search's on 1..4 ranks: MLP", "[plan]") {
    check_against_exhaustive<mlp_engine>(small_mlp);
}

TEST_CASE("the planner's top layouts are the exhaustive search's first, in order", "[plan]") {
    const auto costs = test_costs();
    const auto all = exhaustive<gpt_engine>(4, small_gpt, costs);
    weft::plan::search_space space;
    space.top = 5;
    const auto top = weft::plan::plan_layouts<gpt_engine>(4, 1LL << 40, small_gpt, plan_options, costs, space);
    REQUIRE(top.size() == 5);
    // The exhaustive list without ZeRO > 0 at dp = 1 (the planner leaves those out), and with one
    // entry for layouts that differ only in a schedule that prices the same.
    std::vector<weft::plan::planned_layout> kept;
    for (const auto& p : all)
        if ((p.layout.zero == 0 || p.layout.dp > 1) && (kept.empty() || !weft::plan::equivalent(kept.back(), p)))
            kept.push_back(p);
    for (std::size_t i = 0; i < top.size(); ++i) {
        INFO("place " << i);
        CHECK(top[i].layout.text() == kept[i].layout.text());
    }
    // Unpruned, the same answer.
    space.prune = false;
    const auto unpruned = weft::plan::plan_layouts<gpt_engine>(4, 1LL << 40, small_gpt, plan_options, costs, space);
    for (std::size_t i = 0; i < top.size(); ++i) CHECK(unpruned[i].layout == top[i].layout);
}

TEST_CASE("a budget that excludes the fastest layout picks the next that fits", "[plan]") {
    const auto costs = test_costs();
    const auto all = exhaustive<gpt_engine>(4, small_gpt, costs);
    const auto& fastest = all.front();
    const std::size_t budget = fastest.estimate.peak_bytes - 1;
    const auto* next = first_within(all, budget);
    REQUIRE(next != nullptr);
    const auto chosen = weft::plan::choose_layout<gpt_engine>(4, static_cast<long long>(budget), small_gpt,
                                                              plan_options, costs);
    CHECK(!(chosen.layout == fastest.layout));
    CHECK(chosen.layout == next->layout);
    CHECK(chosen.estimate.step_ms >= fastest.estimate.step_ms);
}

TEST_CASE("more ranks are used only where they are faster", "[plan]") {
    // With costly collectives and links, and little compute, one rank is fastest: the other
    // ranks stay spares.
    weft::plan::cost_model slow_links = test_costs();
    slow_links.forward_ms_per_sample = slow_links.backward_input_ms_per_sample =
        slow_links.backward_weight_ms_per_sample = 1e-4;
    slow_links.p2p_latency_us = slow_links.allreduce_latency_us = 1e4;
    const auto chosen =
        weft::plan::choose_layout<gpt_engine>(4, 1LL << 40, small_gpt, plan_options, slow_links);
    CHECK(chosen.layout.world == 1);
    // With compute dominant, all four.
    weft::plan::cost_model fast_links = test_costs();
    fast_links.p2p_latency_us = fast_links.allreduce_latency_us = 0;
    fast_links.forward_ms_per_sample = 50;
    CHECK(weft::plan::choose_layout<gpt_engine>(4, 1LL << 40, small_gpt, plan_options, fast_links).layout.world == 4);
}

TEST_CASE("no layout within the budget names the budget and the smallest peak", "[plan]") {
    using Catch::Contains;
    const auto costs = test_costs();
    const auto all = exhaustive<mlp_engine>(2, small_mlp, costs);
    std::size_t smallest = all.front().estimate.peak_bytes;
    for (const auto& p : all) smallest = std::min(smallest, p.estimate.peak_bytes);
    CHECK_THROWS_WITH(weft::plan::choose_layout<mlp_engine>(2, 1000, small_mlp, plan_options, costs),
                      Contains("memory_budget = 1000 is invalid: no layout on 1..2 ranks fits in 1000 B per rank") &&
                          Contains("smallest peak per rank") && Contains(std::to_string(smallest) + " bytes"));
}

TEST_CASE("bad input is refused naming the parameter", "[plan]") {
    using Catch::Contains;
    const auto costs = test_costs();
    CHECK_THROWS_WITH(weft::plan::choose_layout<mlp_engine>(0, 1LL << 30, small_mlp, plan_options, costs),
                      Contains("world = 0 is invalid"));
    CHECK_THROWS_WITH(weft::plan::choose_layout<mlp_engine>(2, -5, small_mlp, plan_options, costs),
                      Contains("memory_budget = -5 is invalid"));
    weft::plan::search_space space;
    space.schedules = {"1f1b", "nope"};
    CHECK_THROWS_WITH(weft::plan::choose_layout<mlp_engine>(2, 1LL << 30, small_mlp, plan_options, costs, space),
                      Contains("schedule = \"nope\" is invalid: this engine was compiled for: gpipe, 1f1b"));
    space = {};
    space.microbatches = {0};
    CHECK_THROWS_WITH(weft::plan::choose_layout<mlp_engine>(2, 1LL << 30, small_mlp, plan_options, costs, space),
                      Contains("microbatches = 0 is invalid"));
    space = {};
    space.top = 0;
    CHECK_THROWS_WITH(weft::plan::plan_layouts<mlp_engine>(2, 1LL << 30, small_mlp, plan_options, costs, space),
                      Contains("top = 0 is invalid"));
    auto bad = costs;
    bad.forward_ms_per_sample = -1;
    CHECK_THROWS_WITH(weft::plan::choose_layout<mlp_engine>(2, 1LL << 30, small_mlp, plan_options, bad),
                      Contains("forward_ms_per_sample = -1 is invalid"));
    // A batch no layout divides: the world is named with the reason.
    const weft::train::engine_options odd{.batch_size = 7};
    space = {};
    space.microbatches = {2};
    CHECK_THROWS_WITH(weft::plan::choose_layout<mlp_engine>(2, 1LL << 30, small_mlp, odd, costs, space),
                      Contains("world = 2 is invalid: no layout of the search space"));
}

TEST_CASE("the chosen layout runs on the engine and its text parses back", "[plan]") {
    const auto chosen = weft::plan::choose_layout<gpt_engine>(4, 1LL << 40, small_gpt, plan_options, test_costs());
    const weft::parallel_config config = chosen.layout.config();
    CHECK(config.world_size() == chosen.layout.world);
    CHECK_NOTHROW(gpt_engine::layout_type::layout_of(config, small_gpt, plan_options));
    CHECK(chosen.layout.text().find("microbatches=") != std::string::npos);
    // Its text is run::parse_layout's, which gives back the same config.
    const weft::parallel_config parsed =
        weft::run::parse_layout(chosen.layout.layout_text(true)).config(chosen.layout.microbatches, 4);
    CHECK(parsed.options().pp == config.pp());
    CHECK(parsed.options().dp == config.dp());
    CHECK(parsed.options().tp == config.tp());
    CHECK(parsed.options().zero_stage == config.zero_stage());
    CHECK(parsed.options().chunks == config.chunks());
    CHECK(parsed.options().schedule == config.schedule());
    CHECK(parsed.world_size() == config.world_size());
    CHECK(chosen.estimate.step_ms ==
          Approx(chosen.estimate.pipeline_ms + chosen.estimate.sync_ms + chosen.estimate.optimizer_ms));
}

TEST_CASE("an elastic event searches the micro-batches around its current ones", "[plan]") {
    CHECK(weft::plan::microbatches_around(4) == std::vector<int>{2, 4, 8, 16});
    CHECK(weft::plan::microbatches_around(1) == std::vector<int>{1, 2, 4});
    CHECK_THROWS_WITH(weft::plan::microbatches_around(0), Catch::Contains("microbatches = 0 is invalid"));
    weft::plan::search_space space;
    space.microbatches = weft::plan::microbatches_around(2);
    const auto chosen =
        weft::plan::choose_layout<gpt_engine>(3, 1LL << 40, small_gpt, plan_options, test_costs(), space);
    CHECK(chosen.layout.world <= 3);
    CHECK(plan_options.batch_size % (chosen.layout.dp * chosen.layout.microbatches) == 0);
}

TEST_CASE("a layout's mean idle is the step log's bubble: none on one rank, some in a pipeline", "[plan]") {
    const auto one_f_one_b = weft::sched::parse_schedule_kind("1f1b");
    const auto one = weft::plan::price_layout<mlp_engine>(
        {.world = 1, .schedule = one_f_one_b, .microbatches = 4}, small_mlp, plan_options, test_costs());
    CHECK(one.estimate.mean_idle == 0);
    const auto two = weft::plan::price_layout<mlp_engine>(
        {.world = 2, .pp = 2, .schedule = one_f_one_b, .microbatches = 4}, small_mlp, plan_options, test_costs());
    CHECK(two.estimate.mean_idle > 0);
    CHECK(two.estimate.mean_idle < 1);
    CHECK(two.estimate.bubble > 0);
}
