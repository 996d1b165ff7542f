#include <catch2/catch.hpp>

#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/mlp.hpp"
#include "weft/run/layout.hpp"
#include "weft/run/switch_plan.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/engine.hpp"

namespace {
using layout_engine_type =
    weft::engine<weft::sched::all_schedules, weft::shard::any_zero, weft::comm::local, weft::exec::cpu>;
const weft::nn::mlp_config layout_mlp{.input_dim = 4, .hidden_dim = 8, .num_blocks = 2, .num_classes = 3, .seed = 1};
const weft::train::engine_options layout_options{.batch_size = 8};
}  // namespace

TEST_CASE("parse_layout reads every key and keeps the defaults of those left out", "[run][layout]") {
    const auto l = weft::run::parse_layout("pp=2,dp=3,zero=1,schedule=zb-h1,partition=1,3,chunks=1");
    CHECK(l.pp == 2);
    CHECK(l.dp == 3);
    CHECK(l.tp == 1);
    CHECK(l.zero == 1);
    CHECK(l.schedule == "zb-h1");
    CHECK(l.partition == std::vector<int>{1, 3});
    CHECK(l.chunks == 1);
    CHECK(l.world == 0);
    const auto config = l.config(4, 6);
    CHECK(config.world_size() == 6);
    CHECK(config.zero_stage() == 1);
    CHECK(weft::run::parse_layout("world=2,pp=2").config(2, 8).world_size() == 2);
}

TEST_CASE("parse_layout and parse_layout_switch name the key and what is valid", "[run][layout]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(weft::run::parse_layout("pq=2", "--layout"),
                      Contains("--layout: key = \"pq\" is invalid: is not a layout key; valid: pp, dp, tp"));
    CHECK_THROWS_WITH(weft::run::parse_layout("pp=2,pp=4"), Contains("key = \"pp\" is invalid: is given twice"));
    CHECK_THROWS_WITH(weft::run::parse_layout("zero=4"),
                      Contains("zero = \"4\" is invalid: must be a whole number in [0, 3]"));
    CHECK_THROWS_WITH(weft::run::parse_layout("pp=0x2"), Contains("pp = \"0x2\" is invalid"));
    CHECK_THROWS_WITH(weft::run::parse_layout("2"), Contains("part = \"2\" is invalid: must be key=value"));
    const auto s = weft::run::parse_layout_switch("20:pp=2,dp=2");
    CHECK(s.step == 20);
    CHECK(s.to.pp == 2);
    CHECK_THROWS_WITH(weft::run::parse_layout_switch("pp=2"), Contains("must be STEP:key=value"));
    CHECK_THROWS_WITH(weft::run::parse_layout_switch("3:pq=2"),
                      Contains("--switch 3:pq=2: key = \"pq\" is invalid: is not a layout key"));
}

TEST_CASE("check_layout refuses what the engine cannot run, building nothing", "[run][layout]") {
    using Catch::Contains;
    CHECK(weft::run::check_layout<layout_engine_type>(weft::run::parse_layout("pp=2,dp=2"), 2, 4, layout_mlp,
                                                      layout_options)
              .pp() == 2);
    CHECK_THROWS_WITH(
        weft::run::check_layout<layout_engine_type>(weft::run::parse_layout("pp=3"), 2, 4, layout_mlp, layout_options),
        Contains("must equal the world size 4"));
    // 4 units (2 blocks + input and head) cannot take a partition of 5.
    CHECK_THROWS_WITH(weft::run::check_layout<layout_engine_type>(weft::run::parse_layout("pp=2,dp=2,partition=2,3"), 2,
                                                                  4, layout_mlp, layout_options),
                      Contains("partition"));
}

TEST_CASE("a plan of switches is checked whole before training", "[run][layout]") {
    using Catch::Contains;
    const auto plan = weft::run::plan_switches<layout_engine_type>({"2:pp=4", "4:world=2,pp=2"}, 6, 4, 4, layout_mlp,
                                                                   layout_options, 1);
    REQUIRE(plan.size() == 2);
    CHECK(plan[1].config.world_size() == 2);
    CHECK_THROWS_WITH(weft::run::plan_switches<layout_engine_type>({"6:pp=4"}, 6, 4, 4, layout_mlp, layout_options, 1),
                      Contains("STEP = 6 is invalid: must be below --steps 6"));
    CHECK_THROWS_WITH(
        weft::run::plan_switches<layout_engine_type>({"4:pp=4", "2:pp=4"}, 6, 4, 4, layout_mlp, layout_options, 1),
        Contains("must come after the previous --switch's step"));
    CHECK_THROWS_WITH(
        weft::run::plan_switches<layout_engine_type>({"2:world=8,pp=8"}, 6, 4, 4, layout_mlp, layout_options, 1),
        Contains("world = 8 is invalid: must be at most the 4 ranks launched"));
    CHECK_THROWS_WITH(weft::run::plan_switches<layout_engine_type>({"2:pp=3"}, 6, 4, 4, layout_mlp, layout_options, 1),
                      Contains("--switch = \"2:pp=3\" is invalid: cannot run: "));
}
