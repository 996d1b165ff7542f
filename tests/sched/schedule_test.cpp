// The schedule concept, the schedule list and what derives from it (names, parsing, dispatch
// by schedule_kind, all_schedules), each schedule's chunk rule, and the any_of sets.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/sched/all_schedules.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/schedule_list.hpp"

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
struct unnamed {  // generates, but has no kind a runtime config could choose it by
    static constexpr std::string_view name = "unnamed";
    static constexpr ws::program generate(const schedule_params&) { return {}; }
};
// A schedule of the user's own, not in weft's list.
struct custom {
    static constexpr schedule_kind::description description{.name = "custom"};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;
    static constexpr ws::program generate(const schedule_params& params) { return ws::gpipe::generate(params); }
};
}  // namespace
static_assert(!weft::schedule<old_style>);
static_assert(!ws::named_schedule<unnamed> && ws::program_generator<unnamed> && !weft::schedule<unnamed>);
static_assert(!ws::program_generator<old_style>);
static_assert(weft::schedule<custom>);

// The list's size and order, known at compile time.
static_assert(ws::schedule_list::size == 12);
static_assert(weft::list_index_v<ws::schedule_list, ws::gpipe> == 0);
static_assert(weft::list_index_v<ws::schedule_list, ws::zb_auto> == 11);
static_assert(!weft::list_contains_v<ws::schedule_list, custom>);
static_assert(ws::all_schedules::size == ws::schedule_list::size);
static_assert(std::is_same_v<ws::all_schedules::members, ws::schedule_list>);
static_assert(std::is_same_v<ws::all_schedules, weft::apply_list_t<ws::schedule_list, ws::any_of>>);

// Dispatch runs in constant expressions.
static_assert(ws::generate(ws::interleaved::kind, schedule_params{.ranks = 2, .microbatches = 4, .chunks = 2}) ==
              ws::interleaved::generate({.ranks = 2, .microbatches = 4, .chunks = 2}));
static_assert(ws::generate(ws::one_f_one_b::kind, 3, 5) == ws::one_f_one_b::generate(3, 5));
static_assert(ws::all_schedules::generate("zb-h1", 2, 4) == ws::zb_h1::generate({.ranks = 2, .microbatches = 4}));

// Each schedule's chunk rule, as its description declares it.
static_assert(ws::gpipe::kind.default_chunks() == 1 && ws::one_f_one_b::kind.default_chunks() == 1);
static_assert(ws::interleaved::kind.default_chunks() == 2 && ws::looped_bfs::kind.default_chunks() == 2);
static_assert(ws::zbv::kind.default_chunks() == 2 && ws::dualpipev::kind.default_chunks() == 2);
static_assert(ws::zb_h1::kind.default_chunks() == 1 && ws::zb_h2::kind.default_chunks() == 1 &&
              ws::zb_auto::kind.default_chunks() == 1);
static_assert(ws::interleaved::description.chunks.allows(3) && ws::looped_bfs::description.chunks.allows(64));
static_assert(!ws::zbv::description.chunks.allows(1) && !ws::zbv::description.chunks.allows(3));
static_assert(!ws::one_f_one_b::description.chunks.allows(2) && ws::one_f_one_b::description.chunks.allows(1));

// any_of's default is its first member.
static_assert(ws::any_of<ws::zb_h1, ws::one_f_one_b>::default_kind() == ws::zb_h1::kind);
static_assert(ws::all_schedules::default_kind() == ws::gpipe::kind);
static_assert(ws::any_of_t<ws::zbv>::default_kind() == ws::zbv::kind);
static_assert(ws::any_of<ws::gpipe, ws::zb_h1>::contains(ws::zb_h1::kind));
static_assert(!ws::any_of<ws::gpipe, ws::zb_h1>::contains(ws::zb_h2::kind));
static_assert(!ws::any_of<ws::gpipe, ws::zb_h1>::contains(schedule_kind{}));

namespace {

// Every member of the list, visited in order.
std::vector<schedule_kind> listed_kinds() {
    std::vector<schedule_kind> kinds;
    weft::for_each_type(ws::schedule_list{}, [&kinds]<class S>(std::type_identity<S>) { kinds.push_back(S::kind); });
    return kinds;
}

}  // namespace

TEST_CASE("every listed schedule parses from its name and round-trips", "[sched][schedule_list]") {
    weft::for_each_type(ws::schedule_list{}, []<class S>(std::type_identity<S>) {
        INFO(S::name);
        CHECK(S::kind.chosen());
        CHECK(S::kind.name() == S::name);
        CHECK(ws::parse_schedule_kind(S::name) == S::kind);
        CHECK(weft::to_string(ws::parse_schedule_kind(S::name)) == S::name);
        // The kind dispatches to this very generator.
        const schedule_params params{.ranks = 4, .microbatches = 8, .chunks = S::kind.default_chunks()};
        CHECK(ws::generate(S::kind, params) == S::generate(params));
        CHECK(ws::all_schedules::contains(S::kind));
        CHECK(ws::all_schedules::contains(S::name));
        CHECK(ws::all_schedules::generate(S::kind, params) == S::generate(params));
    });
}

TEST_CASE("listed names are unique and the name list follows the list's order", "[sched][schedule_list]") {
    const std::vector<schedule_kind> kinds = listed_kinds();
    REQUIRE(kinds.size() == ws::schedule_list::size);
    std::set<std::string_view> names;
    std::string joined;
    for (const schedule_kind kind : kinds) {
        names.insert(kind.name());
        joined += (joined.empty() ? "" : ", ") + std::string(kind.name());
    }
    CHECK(names.size() == kinds.size());
    CHECK(ws::schedule_name_list() == joined);
    CHECK(ws::schedule_name_list() == "gpipe, 1f1b, interleaved, looped-bfs, interleaved-zb, zb-h1, zb-h2, zbv, v-half, v-min, dualpipev, "
                                          "zb-auto");
    CHECK(ws::all_schedules::names() == ws::schedule_name_list());
    for (std::size_t i = 0; i < kinds.size(); ++i)
        for (std::size_t j = 0; j < kinds.size(); ++j) CHECK((kinds[i] == kinds[j]) == (i == j));
}

TEST_CASE("unknown names and kinds list the valid ones", "[sched][schedule_list]") {
    CHECK_THROWS_WITH(ws::parse_schedule_kind("zigzag"),
                      "weft: schedule = \"zigzag\" is invalid: expected one of: " + ws::schedule_name_list());
    CHECK_THROWS_AS(ws::parse_schedule_kind(""), weft::error);
    CHECK_THROWS_WITH(ws::parse_schedule_kind("zb_h1"), Catch::Contains("zb-h1"));
    CHECK(ws::parse_schedule_kind("looped-bfs") == ws::looped_bfs::kind);
    CHECK(ws::parse_schedule_kind("zb-auto") == ws::zb_auto::kind);
    const schedule_params one{.ranks = 3, .microbatches = 6};
    CHECK_THROWS_WITH(ws::generate(schedule_kind{}, one),
                      Catch::Contains("kind = none is invalid: no schedule was chosen") &&
                          Catch::Contains("gpipe, 1f1b"));
    CHECK_THROWS_WITH(ws::generate(custom::kind, one),
                      Catch::Contains("kind = custom is invalid: it is not in weft::sched::schedule_list"));
}

TEST_CASE("generate(kind, params) dispatches to every schedule", "[sched][schedule]") {
    const schedule_params one{.ranks = 3, .microbatches = 6};
    const schedule_params two{.ranks = 3, .microbatches = 6, .chunks = 2};
    CHECK(ws::generate(ws::gpipe::kind, one) == ws::gpipe::generate(3, 6));
    CHECK(ws::generate(ws::one_f_one_b::kind, one) == ws::one_f_one_b::generate(3, 6));
    CHECK(ws::generate(ws::interleaved::kind, two) == ws::interleaved::generate(two));
    CHECK(ws::generate(ws::looped_bfs::kind, two) == ws::looped_bfs::generate(two));
    CHECK(ws::generate(ws::zb_h1::kind, one) == ws::zb_h1::generate(one));
    CHECK(ws::generate(ws::zb_h2::kind, one) == ws::zb_h2::generate(one));
    CHECK(ws::generate(ws::gpipe::kind, 3, 6) == ws::gpipe::generate(3, 6));
    // gpipe and 1f1b run one stage per rank.
    CHECK_THROWS_WITH(ws::gpipe::generate(two), "weft: chunks = 2 is invalid: gpipe needs exactly 1 chunk per rank: "
                                                "it runs one stage per rank; valid: 1");
    CHECK_THROWS_WITH(ws::one_f_one_b::generate(two), Catch::Contains("chunks = 2"));
}

TEST_CASE("the generators take their chunk counts from their descriptions", "[sched][schedule]") {
    const auto with_chunks = [](int chunks) {
        return schedule_params{.ranks = 2, .microbatches = 6, .chunks = chunks};
    };
    // interleaved and looped-bfs: any count >= 1.
    for (int v = 1; v <= 3; ++v) {
        CHECK(ws::interleaved::generate(with_chunks(v)).num_stages == 2 * v);
        CHECK(ws::looped_bfs::generate(with_chunks(v)).num_stages == 2 * v);
    }
    // zbv and dualpipev: exactly 2.
    for (const schedule_kind v_shaped : {ws::zbv::kind, ws::dualpipev::kind}) {
        INFO(v_shaped);
        CHECK(ws::generate(v_shaped, with_chunks(2)).num_stages == 4);
        CHECK_THROWS_WITH(ws::generate(v_shaped, with_chunks(1)),
                          Catch::Contains("chunks = 1 is invalid") && Catch::Contains("exactly 2 chunks per rank"));
        CHECK_THROWS_WITH(ws::generate(v_shaped, with_chunks(3)), Catch::Contains("chunks = 3 is invalid"));
    }
    // The rest: exactly 1.
    for (const schedule_kind single : {ws::gpipe::kind, ws::one_f_one_b::kind, ws::zb_h1::kind, ws::zb_h2::kind,
                                       ws::zb_auto::kind}) {
        INFO(single);
        CHECK(ws::generate(single, with_chunks(1)).num_stages == 2);
        CHECK_THROWS_WITH(ws::generate(single, with_chunks(2)), Catch::Contains("exactly 1 chunk per rank"));
    }
}

TEST_CASE("all_schedules holds every listed schedule", "[sched][schedule]") {
    for (const schedule_kind kind : listed_kinds()) {
        INFO(kind);
        CHECK(ws::all_schedules::contains(kind));
    }
    const schedule_params two{.ranks = 2, .microbatches = 4, .chunks = 2};
    CHECK(ws::all_schedules::generate("looped-bfs", two) == ws::looped_bfs::generate(two));
    CHECK(ws::all_schedules::generate(ws::interleaved::kind, two) == ws::interleaved::generate(two));
    CHECK(ws::all_schedules::generate(ws::zb_h2::kind, 2, 3) == ws::zb_h2::generate({.ranks = 2, .microbatches = 3}));
    CHECK_FALSE(ws::all_schedules::contains(custom::kind));
}

TEST_CASE("an any_of runs the kind asked for, or its first member when none is chosen", "[sched][schedule]") {
    using pair = ws::any_of<ws::zb_h1, ws::gpipe>;
    const schedule_params two{.ranks = 2, .microbatches = 4, .chunks = 2};
    CHECK(pair::generate(schedule_kind{}, 2, 4) == ws::zb_h1::generate({.ranks = 2, .microbatches = 4}));
    CHECK(pair::generate(ws::gpipe::kind, 2, 4) == ws::gpipe::generate(2, 4));
    CHECK(pair::names() == "zb-h1, gpipe");
    CHECK_THROWS_WITH(pair::generate("interleaved", two),
                      Catch::Contains("schedule = \"interleaved\"") && Catch::Contains("zb-h1, gpipe"));
    CHECK_THROWS_WITH(pair::generate(ws::zb_h2::kind, 2, 4),
                      "weft: schedule = \"zb-h2\" is invalid: this engine was compiled for: zb-h1, gpipe");
    // A user's own schedule joins a set like any other.
    using mine = ws::any_of<custom, ws::one_f_one_b>;
    CHECK(mine::default_kind() == custom::kind);
    CHECK(mine::generate(schedule_kind{}, 2, 4) == ws::gpipe::generate(2, 4));
}
