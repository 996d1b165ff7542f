#include <catch2/catch.hpp>

#include <string>

#include "weft/core/parallel_config.hpp"

using weft::parallel_config;
using weft::schedule_kind;

TEST_CASE("valid layouts construct and report their sizes") {
    const parallel_config cfg({.pp = 4, .dp = 2, .microbatches = 8, .world_size = 8});
    CHECK(cfg.pp() == 4);
    CHECK(cfg.dp() == 2);
    CHECK(cfg.tp() == 1);
    CHECK(cfg.num_stages() == 4);
    CHECK(cfg.schedule() == schedule_kind::one_f_one_b);
    CHECK_NOTHROW(parallel_config({.pp = 4, .microbatches = 1, .schedule = schedule_kind::gpipe,
                                   .world_size = 4}));
}

TEST_CASE("bad layouts are rejected with a message naming the field") {
    CHECK_THROWS_WITH(parallel_config({.pp = 4, .microbatches = 2, .world_size = 4}),
                      Catch::Contains("microbatches = 2") && Catch::Contains("pp = 4"));
    CHECK_THROWS_WITH(parallel_config({.pp = 2, .dp = 2, .microbatches = 4, .world_size = 3}),
                      Catch::Contains("pp*dp*tp = 4") && Catch::Contains("world size 3"));
    CHECK_THROWS_WITH(parallel_config({.pp = 0, .world_size = 0}), Catch::Contains("pp = 0"));
    CHECK_THROWS_WITH(parallel_config({.pp = -1}), Catch::Contains("pp = -1"));
    CHECK_THROWS_WITH(parallel_config({.dp = -3}), Catch::Contains("dp = -3"));
    CHECK_THROWS_WITH(parallel_config({.tp = 0}), Catch::Contains("tp = 0"));
    CHECK_THROWS_WITH(parallel_config({.microbatches = 0}), Catch::Contains("microbatches = 0"));
    CHECK_THROWS_WITH(parallel_config({.zero_stage = 4}), Catch::Contains("zero_stage = 4"));
    CHECK_THROWS_WITH(parallel_config({.chunks = 2}), Catch::Contains("chunks = 2"));
    CHECK_THROWS_WITH(parallel_config({.world_size = -1}), Catch::Contains("world_size = -1"));
    // Degrees whose product overflows int are still caught, not wrapped into a match.
    CHECK_THROWS_AS(parallel_config({.pp = 65536, .dp = 65536, .world_size = 0}), weft::error);
}

TEST_CASE("chunks per rank follow the schedule's stage placement") {
    const auto with = [](schedule_kind s, int chunks, int microbatches = 8) {
        return parallel_config({.pp = 4, .microbatches = microbatches, .chunks = chunks, .schedule = s,
                                .world_size = 4});
    };
    for (auto s : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::zb_h1,
                   schedule_kind::zb_h2, schedule_kind::zb_auto}) {
        INFO(weft::to_string(s));
        CHECK(with(s, 1).num_stages() == 4);
        CHECK_THROWS_WITH(with(s, 2), Catch::Contains("chunks = 2") && Catch::Contains("valid: 1") &&
                                          Catch::Contains(std::string(weft::to_string(s))));
    }
    for (auto s : {schedule_kind::zbv, schedule_kind::dualpipev}) {
        INFO(weft::to_string(s));
        CHECK(with(s, 2).num_stages() == 8);
        CHECK_THROWS_WITH(with(s, 1), Catch::Contains("chunks = 1") && Catch::Contains("valid: 2"));
        CHECK_THROWS_WITH(with(s, 3), Catch::Contains("chunks = 3") && Catch::Contains("valid: 2"));
    }
    for (auto s : {schedule_kind::interleaved, schedule_kind::looped_bfs}) {
        INFO(weft::to_string(s));
        for (int v = 1; v <= 4; ++v) CHECK(with(s, v).num_stages() == 4 * v);
        CHECK_THROWS_WITH(with(s, 0), Catch::Contains("chunks = 0"));
    }
    // Only 1f1b keeps its micro-batch check here; the generators check the others.
    CHECK_THROWS_WITH(with(schedule_kind::one_f_one_b, 1, 3), Catch::Contains("microbatches = 3"));
    CHECK_NOTHROW(with(schedule_kind::zb_h2, 1, 3));
    CHECK_THROWS_WITH(with(static_cast<schedule_kind>(42), 1), Catch::Contains("schedule = 42"));
}

TEST_CASE("every schedule's default chunk count is one its layout accepts") {
    for (const auto& [kind, name] : weft::schedule_names) {
        INFO("schedule " << name);
        const int chunks = weft::default_chunks(kind);
        CHECK(chunks == (kind == schedule_kind::interleaved || kind == schedule_kind::looped_bfs ||
                                 kind == schedule_kind::zbv || kind == schedule_kind::dualpipev
                             ? 2
                             : 1));
        CHECK_NOTHROW(parallel_config({.pp = 4, .microbatches = 8, .chunks = chunks, .schedule = kind,
                                       .world_size = 4}));
    }
}
