// looped-bfs: PyTorch's ScheduleLoopedBFS, chunk by chunk over all micro-batches.
#include <catch2/catch.hpp>

#include "program_checks.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/looped_bfs.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;
using ws::looped_bfs;

static_assert(ws::valid(ws::lower(looped_bfs::generate({.ranks = 4, .microbatches = 3, .chunks = 2}))));

TEST_CASE("looped-bfs is valid for every size", "[sched][looped_bfs]") {
    for (int p = 1; p <= 16; ++p)
        for (int m : weft_test::sampled_microbatches())
            for (int v = 1; v <= 4; ++v)
                weft_test::check_program(looped_bfs::generate({.ranks = p, .microbatches = m, .chunks = v}),
                                         p, m, v, weft_test::backward_form::full,
                                         [p](int s) { return s % p; });
}

TEST_CASE("looped-bfs runs chunk by chunk, backwards in reverse", "[sched][looped_bfs]") {
    // As PyTorch's _calculate_single_rank_operations for ScheduleLoopedBFS (without its
    // no-op padding): forwards chunk 0 then 1, backwards chunk 1 then 0, micro-batches reversed.
    CHECK(ws::to_text(looped_bfs::generate({.ranks = 2, .microbatches = 3, .chunks = 2})) ==
          "rank 0: 0F0 0F1 0F2 2F0 2F1 2F2 2B2 2B1 2B0 0B2 0B1 0B0\n"
          "rank 1: 1F0 1F1 1F2 3F0 3F1 3F2 3B2 3B1 3B0 1B2 1B1 1B0\n");
    // Every micro-batch is live at the turn: peak m, as GPipe's.
    for (int v = 1; v <= 3; ++v) {
        const auto r = weft_test::unit_replay(looped_bfs::generate({.ranks = 3, .microbatches = 5, .chunks = v}));
        for (double peak : r.peak) CHECK(peak == Approx(5).margin(1e-9));
    }
}

TEST_CASE("looped-bfs rejects bad sizes", "[sched][looped_bfs]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(looped_bfs::generate({.ranks = -1, .microbatches = 2}), Contains("ranks = -1"));
    CHECK_THROWS_WITH(looped_bfs::generate({.ranks = 2, .microbatches = -3}), Contains("microbatches = -3"));
    CHECK_THROWS_WITH(looped_bfs::generate({.ranks = 2, .microbatches = 2, .chunks = -1}), Contains("chunks = -1"));
    CHECK_THROWS_WITH(looped_bfs::generate({.ranks = 1 << 10, .microbatches = 1 << 10, .chunks = 64}),
                      Contains("ranks * chunks * microbatches"));
}
