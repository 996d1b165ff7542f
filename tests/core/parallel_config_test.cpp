#include <catch2/catch.hpp>

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
