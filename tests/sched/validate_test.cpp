// check()/valid(): structure, ordering, SEND/RECV matching and deadlock detection.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <utility>

#include "test_programs.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;
using ws::action;
using enum ws::action_kind;

namespace {

// A one-stage-per-rank program from text: ranks separated by '|', actions by spaces.
// (Nested initializer lists of vectors are not usable in GCC 12 constant evaluation.)
constexpr ws::program make(int microbatches, std::string_view text, bool lowered = false) {
    ws::program p = weft_test::program_from_text(microbatches, text);
    p.lowered = lowered;
    return p;
}

// Lowered 2-stage program, 1 microbatch, with rank 1's RECV_F moved after its F.
constexpr ws::program recv_after_use() {
    return make(1, "0F0 0SEND_F0 0RECV_B0 0B0 | 1F0 1RECV_F0 1B0 1SEND_B0", true);
}

// Each rank first waits for a RECV whose SEND the other rank only issues later.
constexpr ws::program crossed_recvs() {
    return make(1, "0RECV_B0 0F0 0SEND_F0 0B0 | 1RECV_F0 1F0 1B0 1SEND_B0", true);
}

}  // namespace

// B before F on one rank.
static_assert(!ws::valid(make(1, "0B0 0F0")));
static_assert(ws::valid(make(1, "0F0 0B0")));
// A RECV without a SEND.
static_assert(!ws::valid([] {
    auto p = ws::lower(ws::gpipe::generate(2, 2));
    std::erase(p.ranks[0], action{SEND_F, 0, 1});
    return p;
}()));
static_assert(!ws::valid(crossed_recvs()));
static_assert(!ws::check(recv_after_use()).ok);

TEST_CASE("check reports a deadlock naming every blocked rank's next action", "[sched][validate]") {
    const auto v = ws::check(crossed_recvs());
    REQUIRE_FALSE(v.ok);
    CHECK(v.message ==
          "deadlock: rank 0, index 0 (0RECV_B0) waits for 1SEND_B0 (rank 1, index 3); "
          "rank 1, index 0 (1RECV_F0) waits for 0SEND_F0 (rank 0, index 2)");
}

TEST_CASE("check finds deadlocks in compute-only programs", "[sched][validate]") {
    // Rank 0 holds 0F1 back until 0B0, which needs 1B0, which rank 1 runs only after 1F1.
    const auto p = make(2, "0F0 0B0 0F1 0B1 | 1F0 1F1 1B1 1B0");
    const auto v = ws::check(p);
    REQUIRE_FALSE(v.ok);
    CHECK(v.message ==
          "deadlock: rank 0, index 1 (0B0) waits for 1B0 (rank 1, index 3); "
          "rank 1, index 1 (1F1) waits for 0F1 (rank 0, index 2)");
    // Same cycle after lowering: lower() refuses it rather than emit a broken program.
    CHECK_THROWS_WITH(ws::lower(p), Catch::Contains("deadlock"));
}

TEST_CASE("check accepts split backward (I then W) and stage-wide actions", "[sched][validate]") {
    CHECK(ws::check(make(2, "0F0 0F1 0I0 0I1 0W1 0W0 0REDUCE_GRAD 0UNSHARD 0RESHARD")).ok);
    const auto lowered = ws::lower(make(1, "0F0 0I0 0W0 0REDUCE_GRAD | 1F0 1I0 1W0"));
    CHECK(ws::to_text(lowered) ==
          "rank 0: 0F0 0SEND_F0 0RECV_B0 0I0 0W0 0REDUCE_GRAD\n"
          "rank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1W0\n");
    CHECK(ws::check(lowered).ok);
}

namespace {

std::string message_of(const ws::program& p) {
    const auto v = ws::check(p);
    CHECK_FALSE(v.ok);
    CHECK_FALSE(ws::valid(p));
    return v.message;
}

}  // namespace

TEST_CASE("check explains each structural defect", "[sched][validate]") {
    using Catch::Contains;
    CHECK_THAT(message_of(make(1, "0B0 0F0")),
               Contains("rank 0, index 0 (0B0) comes before its forward 0F0 at index 1"));
    CHECK_THAT(message_of(make(1, "0F0 0W0 0I0")),
               Contains("rank 0, index 1 (0W0) comes before 0I0 at index 2"));
    CHECK_THAT(message_of(make(1, "0F0 0B0 0I0 0W0")), Contains("both 0B0 and 0I0 on rank 0"));
    CHECK_THAT(message_of(make(1, "0F0 0I0 0B0")), Contains("both 0B0 and 0I0"));
    CHECK_THAT(message_of(make(1, "0F0 0I0")), Contains("missing 0W0 after 0I0 on rank 0"));
    CHECK_THAT(message_of(make(1, "0F0 0W0")), Contains("missing backward 0B0 (or 0I0 plus 0W0)"));
    CHECK_THAT(message_of(make(1, "0F0 0B0 0W0")), Contains("both 0B0 and 0W0"));
    CHECK_THAT(message_of(make(2, "0F0 0B0 0F1 0B0")),
               Contains("rank 0, index 3 (0B0): duplicate of index 1"));
    CHECK_THAT(message_of(make(2, "0F0 0B0 0B1 0F0")), Contains("duplicate"));
    CHECK_THAT(message_of(make(2, "0F0 0B0 0B1 0W1")), Contains("missing 0F1 on rank 0"));
    CHECK_THAT(message_of(make(2, "0F0 0B0 0F1 0I1")), Contains("missing 0W1"));
    CHECK_THAT(message_of(make(2, "0F0 0B0 0F1 1B1")),
               Contains("rank 0, index 3 (1B1): stage 1 is out of range [0, 1)"));
    CHECK_THAT(message_of(make(2, "0F0 0B0 0F2 0B1")),
               Contains("rank 0, index 2 (0F2): microbatch 2 is out of range [0, 2)"));
    CHECK_THAT(message_of(make(1, "1F0 0B0 | 0F0 1B0")),
               Contains("rank 0, index 0 (1F0): stage 1 runs on rank 1, not on rank 0"));
    CHECK_THAT(message_of(make(1, "0F0 0B0 0F0 0B0")), Contains("duplicate"));

    auto stage_wide_microbatch = make(1, "0F0 0B0");
    stage_wide_microbatch.ranks[0].push_back({ws::action_kind::REDUCE_GRAD, 0, 0});
    CHECK_THAT(message_of(stage_wide_microbatch), Contains("REDUCE_GRAD takes no microbatch"));
    auto unknown_kind = make(1, "0F0 0B0");
    unknown_kind.ranks[0].push_back({static_cast<ws::action_kind>(200), 0, 0});
    CHECK_THAT(message_of(unknown_kind), Contains("action kind 200 is not an action_kind"));
    CHECK_THAT(message_of(make(2, "0F0 0B0 0REDUCE_GRAD 0F1 0B1")),
               Contains("0REDUCE_GRAD) waits for the weight gradients of all 2 microbatches of "
                        "stage 0 (1 done)"));
}

TEST_CASE("check rejects inconsistent sizes", "[sched][validate]") {
    using Catch::Contains;
    auto p = ws::gpipe::generate(2, 2);
    REQUIRE(ws::valid(p));
    auto q = p;
    q.num_ranks = 0;
    CHECK_THAT(message_of(q), Contains("num_ranks = 0"));
    q = p;
    q.num_stages = 3;
    CHECK_THAT(message_of(q), Contains("stage_rank.size() = 2 is invalid: must equal num_stages = 3"));
    q = p;
    q.ranks.pop_back();
    CHECK_THAT(message_of(q), Contains("ranks.size() = 1 is invalid: must equal num_ranks = 2"));
    q = p;
    q.stage_rank[1] = 2;
    CHECK_THAT(message_of(q), Contains("stage_rank[1] = 2 is invalid: must be in [0, 2)"));
    q = p;
    q.num_microbatches = 0;
    CHECK_THAT(message_of(q), Contains("num_microbatches = 0"));
    q = p;
    q.num_microbatches = 1 << 30;  // must not try to allocate tables this big
    CHECK_THAT(message_of(q), Contains("the program has 8 actions"));
    q = p;
    q.num_microbatches = 3;
    CHECK_THAT(message_of(q), Contains("missing 0F2 on rank 0"));
}

TEST_CASE("check matches every SEND with its RECV", "[sched][validate]") {
    using Catch::Contains;
    using enum ws::action_kind;
    const auto good = ws::lower(ws::one_f_one_b::generate(3, 4));
    REQUIRE(ws::valid(good));

    auto drop = [&](ws::action a) {
        auto p = good;
        auto& actions = p.ranks[static_cast<std::size_t>(p.stage_rank[static_cast<std::size_t>(a.stage)])];
        const auto erased = std::erase(actions, a);
        REQUIRE(erased == 1);
        return message_of(p);
    };
    CHECK_THAT(drop({SEND_F, 0, 1}),
               Contains("missing 0SEND_F1 on rank 0 (stage 0 runs on rank 0 and stage 1 on rank 1)"));
    CHECK_THAT(drop({RECV_F, 2, 3}), Contains("missing 2RECV_F3 on rank 2"));
    CHECK_THAT(drop({SEND_B, 1, 0}), Contains("missing 1SEND_B0 on rank 1"));
    CHECK_THAT(drop({RECV_B, 1, 2}), Contains("missing 1RECV_B2 on rank 1"));

    // Comm in a program that claims not to be lowered, and comm to a same-rank stage.
    CHECK_THAT(message_of(make(1, "0F0 0SEND_F0 0B0 | 1F0 1B0")),
               Contains("rank 0, index 1 (0SEND_F0): a program that is not lowered"));
    auto same_rank = make(1, "0F0 0SEND_F0 1RECV_F0 1F0 1B0 0B0", true);
    same_rank.num_stages = 2;
    same_rank.stage_rank = {0, 0};
    CHECK_THAT(message_of(same_rank),
               Contains("(0SEND_F0): its peer stage 1 runs on the same rank"));
    CHECK_THAT(message_of(make(1, "0F0 0RECV_F0 0B0", true)),
               Contains("(0RECV_F0): stage 0 has no neighbour"));
}

TEST_CASE("check wants SENDs after their producer and RECVs before their consumer",
          "[sched][validate]") {
    using Catch::Contains;
    CHECK_THAT(message_of(recv_after_use()),
               Contains("rank 1, index 1 (1RECV_F0) comes after 1F0 at index 0, which needs it"));
    CHECK_THAT(message_of(make(1, "0SEND_F0 0F0 0RECV_B0 0B0 | 1RECV_F0 1F0 1B0 1SEND_B0", true)),
               Contains("rank 0, index 0 (0SEND_F0) comes before 0F0 at index 1"));
    CHECK_THAT(message_of(make(1, "0F0 0SEND_F0 0B0 0RECV_B0 | 1RECV_F0 1F0 1B0 1SEND_B0", true)),
               Contains("(0RECV_B0) comes after 0B0 at index 2"));
    CHECK_THAT(message_of(make(1, "0F0 0SEND_F0 0RECV_B0 0B0 | 1RECV_F0 1F0 1SEND_B0 1B0", true)),
               Contains("(1SEND_B0) comes before 1B0 at index 3"));
}
