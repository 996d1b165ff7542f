// lower(): inserting SEND/RECV between stages on different ranks.
#include <catch2/catch.hpp>

#include <string>

#include "weft/sched/gpipe.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;

static_assert(ws::valid(ws::lower(ws::one_f_one_b::generate(4, 8))));
static_assert(ws::valid(ws::lower(ws::gpipe::generate(4, 8))));

TEST_CASE("lower puts SENDs right after and RECVs right before the compute", "[sched][lower]") {
    const auto p = ws::lower(ws::gpipe::generate(3, 2));
    CHECK(p.lowered);
    CHECK(ws::to_text(p) ==
          "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
          "rank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1 "
          "1RECV_B0 1B0 1SEND_B0 1RECV_B1 1B1 1SEND_B1\n"
          "rank 2: 2RECV_F0 2F0 2RECV_F1 2F1 2B0 2SEND_B0 2B1 2SEND_B1\n");
}

TEST_CASE("lower adds no comm between stages on the same rank", "[sched][lower]") {
    using enum ws::action_kind;
    // Four stages on two ranks: {0, 1} on rank 0, {2, 3} on rank 1; I/W split on stage 2.
    ws::program p;
    p.num_ranks = 2;
    p.num_stages = 4;
    p.num_microbatches = 1;
    p.stage_rank = {0, 0, 1, 1};
    p.ranks = {{{F, 0, 0}, {F, 1, 0}, {B, 1, 0}, {B, 0, 0}, {REDUCE_GRAD, 0, -1}},
               {{F, 2, 0}, {F, 3, 0}, {B, 3, 0}, {I, 2, 0}, {W, 2, 0}}};
    REQUIRE(ws::valid(p));
    const auto lowered = ws::lower(p);
    CHECK(ws::to_text(lowered) ==
          "rank 0: 0F0 1F0 1SEND_F0 1RECV_B0 1B0 0B0 0REDUCE_GRAD\n"
          "rank 1: 2RECV_F0 2F0 3F0 3B0 2I0 2SEND_B0 2W0\n");
    CHECK(ws::check(lowered).ok);
}

TEST_CASE("lower rejects lowered or invalid programs", "[sched][lower]") {
    const auto lowered = ws::lower(ws::one_f_one_b::generate(2, 2));
    CHECK_THROWS_WITH(ws::lower(lowered), Catch::Contains("already lowered"));

    auto broken = ws::gpipe::generate(2, 2);
    broken.ranks[1].pop_back();  // drop 1B1
    CHECK_THROWS_WITH(ws::lower(broken), Catch::Contains("invalid") && Catch::Contains("1B1"));

    auto wrong_sizes = ws::gpipe::generate(2, 2);
    wrong_sizes.num_ranks = 3;
    CHECK_THROWS_AS(ws::lower(wrong_sizes), weft::error);
}
