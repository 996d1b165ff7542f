// sched::add_shard_actions: REDUCE_GRAD right after a stage's last weight-gradient
// action, UNSHARD prefetched ahead of its first use and RESHARD after its last, for every
// schedule; check_shard_actions rejects programs that break those rules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "test_programs.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/render_ascii.hpp"
#include "weft/sched/shard_actions.hpp"
#include "weft/sched/validate.hpp"

using namespace weft::sched;

namespace {

std::string row_text(const std::vector<action>& row) {
    std::string text;
    for (const auto& a : row) text += (text.empty() ? "" : " ") + to_string(a);
    return text;
}

}  // namespace

TEST_CASE("REDUCE_GRAD follows a stage's last weight gradients, RESHARD its last use", "[sched][shard]") {
    // 2 stages, 2 micro-batches, zero-bubble style split backward on rank 1.
    const program compute = weft_test::program_from_text(2, "0F0 0F1 0B0 0B1 | 1F0 1I0 1F1 1I1 1W0 1W1");
    const program p = add_shard_actions(lower(compute), {.reduce_grad = true, .unshard = true, .prefetch = 1});
    CHECK(row_text(p.ranks[0]) == "0UNSHARD 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0REDUCE_GRAD 0RESHARD");
    CHECK(row_text(p.ranks[1]) ==
          "1UNSHARD 1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1F1 1I1 1SEND_B1 1W0 1W1 1REDUCE_GRAD 1RESHARD");
    // The UNSHARD goes ahead of the RECV feeding the first use, and REDUCE_GRAD/RESHARD
    // after the SEND of the last one, which a neighbour waits for.
    program v = weft_test::program_from_text(1, "0F0 2F0 2B0 0B0 | 1F0 3F0 3B0 1B0");
    v.num_stages = 4;
    v.stage_rank = {0, 1, 0, 1};
    const program pv = add_shard_actions(lower(v), {.reduce_grad = true, .unshard = true, .prefetch = 0});
    CHECK(row_text(pv.ranks[0]) ==
          "0UNSHARD 0F0 0SEND_F0 2UNSHARD 2RECV_F0 2F0 2SEND_F0 2RECV_B0 2B0 2SEND_B0 "
          "2REDUCE_GRAD 2RESHARD 0RECV_B0 0B0 0REDUCE_GRAD 0RESHARD");
    CHECK(check_shard_actions(p, {.reduce_grad = true, .unshard = true}).ok);
    CHECK(check(p).ok);
    // Without ZeRO-3 only REDUCE_GRAD is added.
    const program dp = add_shard_actions(lower(compute));
    CHECK(row_text(dp.ranks[1]) == "1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1F1 1I1 1SEND_B1 1W0 1W1 1REDUCE_GRAD");
}

TEST_CASE("UNSHARD is prefetched the given number of compute actions ahead", "[sched][shard]") {
    // Interleaved placement: stages 0 and 2 on rank 0, so stage 2's UNSHARD can start
    // while stage 0 computes.
    program compute = weft_test::program_from_text(1, "0F0 2F0 2B0 0B0 | 1F0 3F0 3B0 1B0");
    compute.num_stages = 4;
    compute.stage_rank = {0, 1, 0, 1};
    for (const int prefetch : {0, 1, 5}) {
        const program p =
            add_shard_actions(lower(compute), {.reduce_grad = true, .unshard = true, .prefetch = prefetch});
        INFO("prefetch " << prefetch << ": " << row_text(p.ranks[0]));
        const auto& row = p.ranks[0];
        const auto at = [&](const action& a) { return std::find(row.begin(), row.end(), a) - row.begin(); };
        const auto unshard_2 = at({action_kind::UNSHARD, 2, -1});
        if (prefetch == 0)
            CHECK(unshard_2 == at({action_kind::RECV_F, 2, 0}) - 1);
        else
            CHECK(unshard_2 < at({action_kind::F, 0, 0}));  // ahead of stage 0's forward (clamped to the start)
        CHECK(check_shard_actions(p, {.reduce_grad = true, .unshard = true}).ok);
    }
}

TEST_CASE("every schedule gets valid shard actions", "[sched][shard]") {
    for (const auto& [name, compute] : weft_test::every_schedule()) {
        INFO(name);
        const program p = add_shard_actions(lower(compute), {.reduce_grad = true, .unshard = true, .prefetch = 2});
        const auto verdict = check_shard_actions(p, {.reduce_grad = true, .unshard = true});
        INFO(verdict.message);
        CHECK(verdict.ok);
        CHECK(check(p).ok);
        std::size_t reduces = 0;
        for (const auto& row : p.ranks)
            reduces += std::size_t(std::count_if(row.begin(), row.end(),
                                                 [](const action& a) { return a.kind == action_kind::REDUCE_GRAD; }));
        CHECK(reduces == std::size_t(p.num_stages));
    }
}

TEST_CASE("check_shard_actions names what is missing or misplaced", "[sched][shard]") {
    const program compute = weft_test::program_from_text(1, "0F0 0B0 | 1F0 1B0");
    program p = add_shard_actions(lower(compute), {.reduce_grad = true, .unshard = true});
    // Move stage 1's REDUCE_GRAD before its backward.
    auto& row = p.ranks[1];
    const auto reduce = std::find(row.begin(), row.end(), action{action_kind::REDUCE_GRAD, 1, -1});
    REQUIRE(reduce != row.end());
    row.erase(reduce);
    row.insert(row.begin(), action{action_kind::REDUCE_GRAD, 1, -1});
    auto verdict = check_shard_actions(p, {.reduce_grad = true, .unshard = true});
    CHECK(!verdict.ok);
    CHECK_THAT(verdict.message, Catch::Matchers::Contains("stage 1") && Catch::Matchers::Contains("REDUCE_GRAD") &&
                                    Catch::Matchers::Contains("too early"));
    // A missing UNSHARD.
    program q = add_shard_actions(lower(compute), {.reduce_grad = true, .unshard = true});
    q.ranks[0].erase(q.ranks[0].begin());
    verdict = check_shard_actions(q, {.reduce_grad = true, .unshard = true});
    CHECK_THAT(verdict.message, Catch::Matchers::Contains("stage 0") && Catch::Matchers::Contains("UNSHARD"));
    // Adding twice, or to a program that is not lowered, is refused.
    CHECK_THROWS_WITH(add_shard_actions(p), Catch::Matchers::Contains("already has stage-wide actions"));
    CHECK_THROWS_WITH(add_shard_actions(compute), Catch::Matchers::Contains("lowered"));
}
