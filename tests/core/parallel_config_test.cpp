#include <catch2/catch.hpp>

#include <string>
#include <type_traits>

#include "weft/core/parallel_config.hpp"
// The real schedules' descriptions, to check the layouts each one accepts; core itself
// does not include sched/.
#include "weft/sched/schedule_list.hpp"

using weft::parallel_config;
using weft::schedule_kind;
namespace ws = weft::sched;

TEST_CASE("valid layouts construct and report their sizes") {
    const parallel_config cfg({.pp = 4, .dp = 2, .microbatches = 8, .world_size = 8});
    CHECK(cfg.pp() == 4);
    CHECK(cfg.dp() == 2);
    CHECK(cfg.tp() == 1);
    CHECK(cfg.num_stages() == 4);
    CHECK_FALSE(cfg.schedule().chosen());  // none by default: the engine's set picks
    CHECK_NOTHROW(parallel_config({.pp = 4, .microbatches = 1, .schedule = ws::gpipe::kind, .world_size = 4}));
}

TEST_CASE("a config without a schedule is accepted and leaves the choice to the engine") {
    const parallel_config cfg({.pp = 4, .microbatches = 2, .chunks = 3, .world_size = 4});
    CHECK_FALSE(cfg.schedule().chosen());
    CHECK(cfg.schedule() == schedule_kind{});
    CHECK(weft::to_string(cfg.schedule()) == "none");
    CHECK(cfg.num_stages() == 12);
    // The same layout under 1f1b is refused twice over: chunks first.
    CHECK_THROWS_WITH(parallel_config({.pp = 4, .microbatches = 2, .chunks = 3, .schedule = ws::one_f_one_b::kind,
                                       .world_size = 4}),
                      "weft: chunks = 3 is invalid: schedule 1f1b runs one stage per rank; valid: 1");
}

TEST_CASE("bad layouts are rejected with a message naming the field") {
    CHECK_THROWS_WITH(parallel_config({.pp = 4, .microbatches = 2, .schedule = ws::one_f_one_b::kind, .world_size = 4}),
                      "weft: microbatches = 2 is invalid: schedule 1f1b needs at least as many micro-batches as "
                      "pipeline stages (pp = 4)");
    CHECK_THROWS_WITH(parallel_config({.pp = 2, .dp = 2, .microbatches = 4, .world_size = 3}),
                      Catch::Contains("pp*dp*tp = 4") && Catch::Contains("world size 3"));
    CHECK_THROWS_WITH(parallel_config({.pp = 0, .world_size = 0}), Catch::Contains("pp = 0"));
    CHECK_THROWS_WITH(parallel_config({.pp = -1}), Catch::Contains("pp = -1"));
    CHECK_THROWS_WITH(parallel_config({.dp = -3}), Catch::Contains("dp = -3"));
    CHECK_THROWS_WITH(parallel_config({.tp = 0}), Catch::Contains("tp = 0"));
    CHECK_THROWS_WITH(parallel_config({.microbatches = 0}), Catch::Contains("microbatches = 0"));
    CHECK_THROWS_WITH(parallel_config({.zero_stage = 4}), Catch::Contains("zero_stage = 4"));
    CHECK_THROWS_WITH(parallel_config({.chunks = 0}), Catch::Contains("chunks = 0"));
    CHECK_THROWS_WITH(parallel_config({.chunks = 2, .schedule = ws::gpipe::kind}), Catch::Contains("chunks = 2"));
    CHECK_THROWS_WITH(parallel_config({.world_size = -1}), Catch::Contains("world_size = -1"));
    // Degrees whose product overflows int are still caught, not wrapped into a match.
    CHECK_THROWS_AS(parallel_config({.pp = 65536, .dp = 65536, .world_size = 0}), weft::error);
}

TEST_CASE("chunks per rank follow the schedule's stage placement") {
    const auto with = [](schedule_kind s, int chunks, int microbatches = 8) {
        return parallel_config({.pp = 4, .microbatches = microbatches, .chunks = chunks, .schedule = s,
                                .world_size = 4});
    };
    for (auto s : {ws::gpipe::kind, ws::one_f_one_b::kind, ws::zb_h1::kind, ws::zb_h2::kind, ws::zb_auto::kind}) {
        INFO(s);
        CHECK(with(s, 1).num_stages() == 4);
        CHECK_THROWS_WITH(with(s, 2), "weft: chunks = 2 is invalid: schedule " + std::string(weft::to_string(s)) +
                                          " runs one stage per rank; valid: 1");
    }
    for (auto s : {ws::zbv::kind, ws::dualpipev::kind}) {
        INFO(s);
        CHECK(with(s, 2).num_stages() == 8);
        CHECK_THROWS_WITH(with(s, 1), Catch::Contains("chunks = 1") &&
                                          Catch::EndsWith("schedule " + std::string(weft::to_string(s)) +
                                                          " places two stages per rank in a V; valid: 2"));
        CHECK_THROWS_WITH(with(s, 3), Catch::Contains("chunks = 3") && Catch::Contains("valid: 2"));
    }
    for (auto s : {ws::interleaved::kind, ws::looped_bfs::kind}) {
        INFO(s);
        for (int v = 1; v <= 4; ++v) CHECK(with(s, v).num_stages() == 4 * v);
        CHECK_THROWS_WITH(with(s, 0), Catch::Contains("chunks = 0"));
    }
    // Only 1f1b keeps its micro-batch check here; the generators check the others.
    CHECK_THROWS_WITH(with(ws::one_f_one_b::kind, 1, 3), Catch::Contains("microbatches = 3"));
    CHECK_NOTHROW(with(ws::zb_h2::kind, 1, 3));
}

TEST_CASE("every schedule's default chunk count is one its layout accepts") {
    weft::for_each_type(ws::schedule_list{}, [](auto type) {
        using S = typename decltype(type)::type;
        INFO("schedule " << S::name);
        const int chunks = S::kind.default_chunks();
        const bool more_than_one = std::is_same_v<S, ws::interleaved> || std::is_same_v<S, ws::looped_bfs> ||
                                   std::is_same_v<S, ws::interleaved_zb> || std::is_same_v<S, ws::zbv> ||
                                   std::is_same_v<S, ws::v_half> || std::is_same_v<S, ws::v_min> ||
                                   std::is_same_v<S, ws::dualpipev>;
        CHECK(chunks == (more_than_one ? 2 : 1));
        CHECK_NOTHROW(parallel_config({.pp = 4, .microbatches = 8, .chunks = chunks, .schedule = S::kind,
                                       .world_size = 4}));
    });
    // interleaved also takes 3, zbv neither 1 nor 3.
    CHECK_NOTHROW(parallel_config({.pp = 2, .microbatches = 4, .chunks = 3, .schedule = ws::interleaved::kind,
                                   .world_size = 2}));
    for (const int chunks : {1, 3})
        CHECK_THROWS(parallel_config(
            {.pp = 2, .microbatches = 4, .chunks = chunks, .schedule = ws::zbv::kind, .world_size = 2}));
}
