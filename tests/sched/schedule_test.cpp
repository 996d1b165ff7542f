// The schedule concept, the runtime dispatch by schedule_kind and the any_of sets.
#include <catch2/catch.hpp>

#include <string>

#include "weft/sched/all_schedules.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/schedule.hpp"

namespace ws = weft::sched;
using weft::schedule_kind;
using ws::schedule_params;

static_assert(weft::schedule<ws::gpipe>);
static_assert(weft::schedule<ws::one_f_one_b>);
static_assert(weft::schedule<ws::interleaved>);
static_assert(weft::schedule<ws::looped_bfs>);
static_assert(weft::schedule<ws::zb_h1>);
static_assert(weft::schedule<ws::zb_h2>);
static_assert(weft::schedule<ws::zbv>);
static_assert(weft::schedule<ws::dualpipev>);
static_assert(weft::schedule<ws::zb_auto>);
static_assert(!weft::schedule<int>);

namespace {
struct old_style {  // only the pre-issue-3 generate(ranks, microbatches)
    static constexpr std::string_view name = "old";
    static constexpr ws::program generate(int, int) { return {}; }
};
}  // namespace
static_assert(!weft::schedule<old_style>);

static_assert(ws::generate(schedule_kind::interleaved, schedule_params{.ranks = 2, .microbatches = 4, .chunks = 2}) ==
              ws::interleaved::generate({.ranks = 2, .microbatches = 4, .chunks = 2}));
static_assert(ws::generate(schedule_kind::one_f_one_b, 3, 5) == ws::one_f_one_b::generate(3, 5));
static_assert(ws::all_schedules::generate("zb-h1", 2, 4) == ws::zb_h1::generate({.ranks = 2, .microbatches = 4}));

TEST_CASE("generate(kind, params) dispatches to every schedule", "[sched][schedule]") {
    const schedule_params one{.ranks = 3, .microbatches = 6};
    const schedule_params two{.ranks = 3, .microbatches = 6, .chunks = 2};
    CHECK(ws::generate(schedule_kind::gpipe, one) == ws::gpipe::generate(3, 6));
    CHECK(ws::generate(schedule_kind::one_f_one_b, one) == ws::one_f_one_b::generate(3, 6));
    CHECK(ws::generate(schedule_kind::interleaved, two) == ws::interleaved::generate(two));
    CHECK(ws::generate(schedule_kind::looped_bfs, two) == ws::looped_bfs::generate(two));
    CHECK(ws::generate(schedule_kind::zb_h1, one) == ws::zb_h1::generate(one));
    CHECK(ws::generate(schedule_kind::zb_h2, one) == ws::zb_h2::generate(one));
    CHECK(ws::generate(schedule_kind::gpipe, 3, 6) == ws::gpipe::generate(3, 6));
    // gpipe and 1f1b run one stage per rank.
    CHECK_THROWS_WITH(ws::gpipe::generate(two), Catch::Contains("chunks = 2") && Catch::Contains("valid: 1"));
    CHECK_THROWS_WITH(ws::one_f_one_b::generate(two), Catch::Contains("chunks = 2"));
    CHECK_THROWS_WITH(ws::generate(static_cast<schedule_kind>(99), one), Catch::Contains("kind = 99"));
}

TEST_CASE("all_schedules holds every schedule kind by its name", "[sched][schedule]") {
    for (const auto& [kind, name] : weft::schedule_names) {
        INFO(name);
        CHECK(ws::all_schedules::contains(name));
    }
    const std::string names = ws::all_schedules::names();
    CHECK(names == "gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zb-h2, zbv, dualpipev, zb-auto");
    const schedule_params two{.ranks = 2, .microbatches = 4, .chunks = 2};
    CHECK(ws::all_schedules::generate("looped-bfs", two) == ws::looped_bfs::generate(two));
    CHECK(ws::all_schedules::generate(schedule_kind::interleaved, two) == ws::interleaved::generate(two));
    CHECK(ws::all_schedules::generate(schedule_kind::zb_h2, 2, 3) == ws::zb_h2::generate({.ranks = 2, .microbatches = 3}));
    using pair = ws::any_of<ws::gpipe, ws::zb_h1>;
    CHECK_THROWS_WITH(pair::generate("interleaved", two),
                      Catch::Contains("schedule = \"interleaved\"") && Catch::Contains("gpipe, zb-h1"));
    CHECK_THROWS_WITH(pair::generate(schedule_kind::zb_h2, 2, 4), Catch::Contains("zb-h2"));
}
