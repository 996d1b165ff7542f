// check() and lower() on programs with OVERLAP_F_B pairs and with several stages per rank.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>

#include "test_programs.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;
using ws::action;
using enum ws::action_kind;

namespace {

// Ranks separated by '|', actions by spaces; stage s on rank stage_rank[s] (default: s).
constexpr ws::program placed_program(int microbatches, std::string_view text, int stages = 0,
                                     std::string_view placement = "") {
    ws::program p = weft_test::program_from_text(microbatches, text);
    p.num_stages = stages == 0 ? p.num_ranks : stages;
    p.stage_rank.clear();
    for (int s = 0; s < p.num_stages; ++s)
        p.stage_rank.push_back(placement.empty() ? s : placement[static_cast<std::size_t>(s)] - '0');
    return p;
}

// Two ranks, three micro-batches; each rank overlaps a forward with an earlier backward.
constexpr ws::program overlapped() {
    return placed_program(3,
                "0F0 0F1 (0F2;0B0)OVERLAP_F_B 0B1 0B2 | "
                "1F0 (1F1;1B0)OVERLAP_F_B (1F2;1B1)OVERLAP_F_B 1B2");
}

std::string overlap_message(const ws::program& p) { return ws::check(p).message; }

}  // namespace

static_assert(ws::valid(overlapped()));
static_assert(ws::valid(ws::lower(overlapped())));

TEST_CASE("check runs an OVERLAP_F_B as its forward then its backward", "[sched][overlap]") {
    CHECK(ws::check(overlapped()).ok);
    // Same (stage, micro-batch): the forward runs first, so the pair is legal.
    CHECK(ws::check(placed_program(1, "(0F0;0B0)OVERLAP_F_B")).ok);
    CHECK(ws::check(placed_program(1, "(0F0;0I0)OVERLAP_F_B 0W0")).ok);
    // The pair waits for both inputs: here rank 1's pair needs 0F1, which rank 0 only runs
    // inside a pair that waits for 1B0 from rank 1's pair.
    const auto deadlock = placed_program(2, "0F0 (0F1;0B0)OVERLAP_F_B 0B1 | 1F0 (1F1;1B0)OVERLAP_F_B 1B1");
    const std::string message = overlap_message(deadlock);
    CHECK_THAT(message, Catch::Contains("deadlock"));
    CHECK_THAT(message, Catch::Contains("(0F1;0B0)OVERLAP_F_B) waits for 1B0"));
    CHECK_THAT(message, Catch::Contains("(1F1;1B0)OVERLAP_F_B) waits for 0F1"));
}

TEST_CASE("check names what is wrong inside an OVERLAP_F_B", "[sched][overlap]") {
    using Catch::Contains;
    CHECK_THAT(overlap_message(placed_program(1, "0F0 (0F0;0B0)OVERLAP_F_B")),
               Contains("index 1 ((0F0;0B0)OVERLAP_F_B): duplicate of index 0") && Contains("(0F0)"));
    CHECK_THAT(overlap_message(placed_program(1, "(0F0;1B0)OVERLAP_F_B | 1F0 1B0")),
               Contains("(0F0;1B0)OVERLAP_F_B): stage 1 runs on rank 1, not on rank 0"));
    CHECK_THAT(overlap_message(placed_program(1, "(0F0;0B3)OVERLAP_F_B")), Contains("microbatch 3 is out of range"));
    CHECK_THAT(overlap_message(placed_program(2, "(0F1;0B0)OVERLAP_F_B 0F0 0B1")),
               Contains("index 0 ((0F1;0B0)OVERLAP_F_B) comes before its forward 0F0 at index 1"));
    CHECK_THAT(overlap_message(placed_program(1, "0F0 (0F0;0B0)OVERLAP_F_B")), Contains("duplicate"));
    CHECK_THAT(overlap_message(placed_program(1, "(0F0;0I0)OVERLAP_F_B")), Contains("missing 0W0 after 0I0"));
    auto bad_kind = placed_program(1, "(0F0;0B0)OVERLAP_F_B");
    bad_kind.ranks[0][0].overlap_backward_kind = W;
    CHECK_THAT(overlap_message(bad_kind), Contains("backward part of an OVERLAP_F_B must be a B or an I, not W"));
    auto stray_fields = placed_program(1, "0F0 0B0");
    stray_fields.ranks[0][1].overlap_stage = 0;
    CHECK_THAT(overlap_message(stray_fields), Contains("only an OVERLAP_F_B sets the overlap_* fields"));
}

TEST_CASE("lower puts every RECV of a pair before it and every SEND after it", "[sched][overlap]") {
    CHECK(ws::to_text(ws::lower(overlapped())) ==
          "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 (0F2;0B0)OVERLAP_F_B 0SEND_F2 0RECV_B1 0B1 "
          "0RECV_B2 0B2\n"
          "rank 1: 1RECV_F0 1F0 1RECV_F1 (1F1;1B0)OVERLAP_F_B 1SEND_B0 1RECV_F2 (1F2;1B1)OVERLAP_F_B "
          "1SEND_B1 1B2 1SEND_B2\n");
    // A middle stage: both RECVs before, both SENDs after, forward's first.
    const auto three = placed_program(2,
                            "0F0 0F1 0B0 0B1 | 1F0 (1F1;1B0)OVERLAP_F_B 1B1 | 2F0 2B0 2F1 2B1");
    REQUIRE(ws::check(three).ok);
    CHECK(ws::to_text(ws::lower(three)) ==
          "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
          "rank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_F1 1RECV_B0 (1F1;1B0)OVERLAP_F_B 1SEND_F1 1SEND_B0 "
          "1RECV_B1 1B1 1SEND_B1\n"
          "rank 2: 2RECV_F0 2F0 2B0 2SEND_B0 2RECV_F1 2F1 2B1 2SEND_B1\n");
    CHECK(ws::check(ws::lower(three)).ok);
}

TEST_CASE("stages on the same rank hand data over without comm", "[sched][lower]") {
    // V placement, p = 2: stages 0 and 3 on rank 0, stages 1 and 2 on rank 1.
    const auto v = placed_program(1, "0F0 3F0 3B0 0B0 | 1F0 2F0 2B0 1B0", 4, "0110");
    REQUIRE(ws::check(v).ok);
    CHECK(ws::to_text(ws::lower(v)) ==
          "rank 0: 0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0\n"
          "rank 1: 1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0\n");
    CHECK(ws::check(ws::lower(v)).ok);
    // Looped placement on one rank: no comm at all.
    const auto one_rank = placed_program(2, "0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1", 2, "00");
    CHECK(ws::lower(one_rank).ranks == one_rank.ranks);
    // detail::v_program places stage s on rank s (s < p) else 2p-1-s.
    const auto shell = ws::detail::v_program(3, 1);
    CHECK(shell.stage_rank == std::vector<int>{0, 1, 2, 2, 1, 0});
    CHECK(ws::detail::looped_program(3, 2, 1).stage_rank == std::vector<int>{0, 1, 2, 0, 1, 2});
    // A comm action between two stages of one rank is rejected.
    auto needless = ws::lower(v);
    needless.ranks[1].insert(needless.ranks[1].begin() + 3, action{SEND_F, 1, 0});
    CHECK_THAT(overlap_message(needless), Catch::Contains("runs on the same rank, which needs no communication"));
}
