// The schedule generators (gpipe, 1F1B) and the runtime dispatch by schedule_kind.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "weft/sched/gpipe.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;
using ws::action;
using ws::action_kind;

static_assert(weft::schedule<ws::gpipe>);
static_assert(weft::schedule<ws::one_f_one_b>);
static_assert(!weft::schedule<int>);
static_assert(ws::valid(ws::one_f_one_b::generate(4, 8)));
static_assert(ws::valid(ws::gpipe::generate(4, 8)));
static_assert(ws::generate(ws::one_f_one_b::kind, 3, 5) ==
              ws::one_f_one_b::generate(3, 5));

namespace {

std::vector<std::string> texts(const std::vector<action>& actions) {
    std::vector<std::string> out;
    for (const action& a : actions) out.push_back(ws::to_string(a));
    return out;
}

std::vector<std::string> split(const std::string& line) {
    std::vector<std::string> out;
    std::string word;
    for (char c : line) {
        if (c == ' ') {
            if (!word.empty()) out.push_back(word);
            word.clear();
        } else {
            word += c;
        }
    }
    if (!word.empty()) out.push_back(word);
    return out;
}

// Same stage layout for both generators: stage s on rank s, 2m actions per rank, each
// microbatch's F then B, nothing else.
void check_shape(const ws::program& p, int ranks, int m) {
    REQUIRE(p.num_ranks == ranks);
    REQUIRE(p.num_stages == ranks);
    REQUIRE(p.num_microbatches == m);
    REQUIRE_FALSE(p.lowered);
    REQUIRE(p.ranks.size() == static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
        CHECK(p.stage_rank[static_cast<std::size_t>(r)] == r);
        const auto& actions = p.ranks[static_cast<std::size_t>(r)];
        REQUIRE(actions.size() == 2 * static_cast<std::size_t>(m));
        int forwards = 0, backwards = 0;
        for (const action& a : actions) {
            CHECK(a.stage == r);
            if (a.kind == action_kind::F) CHECK(a.microbatch == forwards++);
            else if (a.kind == action_kind::B) CHECK(a.microbatch == backwards++);
            else FAIL("unexpected " << ws::to_string(a));
        }
        CHECK(forwards == m);
        CHECK(backwards == m);
    }
}

}  // namespace

TEST_CASE("gpipe runs all forwards, then all backwards", "[sched][gpipe]") {
    const auto p = ws::gpipe::generate(3, 4);
    CHECK(ws::to_text(p) ==
          "rank 0: 0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3\n"
          "rank 1: 1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3\n"
          "rank 2: 2F0 2F1 2F2 2F3 2B0 2B1 2B2 2B3\n");
}

TEST_CASE("1F1B matches PyTorch's Schedule1F1B order for p = 4, m = 8", "[sched][1f1b]") {
    const auto p = ws::one_f_one_b::generate(4, 8);
    // rank 0: 3 warm-up forwards, then F/B pairs, then 3 cool-down backwards.
    CHECK(texts(p.ranks[0]) == split("0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7"));
    CHECK(texts(p.ranks[1]) == split("1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7"));
    // the last rank has no warm-up: strict alternation.
    CHECK(texts(p.ranks[3]) == split("3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7"));
}

TEST_CASE("1F1B keeps at most p - r microbatches in flight on rank r", "[sched][1f1b]") {
    for (int ranks = 1; ranks <= 8; ++ranks) {
        for (int m = ranks; m <= 16; ++m) {
            const auto p = ws::one_f_one_b::generate(ranks, m);
            for (int r = 0; r < ranks; ++r) {
                int live = 0, peak = 0;
                for (const action& a : p.ranks[static_cast<std::size_t>(r)]) {
                    live += a.kind == action_kind::F ? 1 : -1;
                    peak = std::max(peak, live);
                }
                CHECK(peak == ranks - r);
            }
        }
    }
}

TEST_CASE("generated programs are valid before and after lowering", "[sched][gpipe][1f1b]") {
    for (int ranks = 1; ranks <= 8; ++ranks) {
        for (int m = 1; m <= 16; ++m) {
            INFO("ranks = " << ranks << ", microbatches = " << m);
            std::vector<ws::program> programs{ws::gpipe::generate(ranks, m)};
            if (m >= ranks) programs.push_back(ws::one_f_one_b::generate(ranks, m));
            for (const auto& p : programs) {
                check_shape(p, ranks, m);
                const auto before = ws::check(p);
                CHECK(before.ok);
                CHECK(before.message.empty());
                const auto lowered = ws::lower(p);
                const auto after = ws::check(lowered);
                INFO(after.message);
                CHECK(after.ok);
                // Every boundary carries one SEND and one RECV per microbatch each way.
                std::size_t comm = 0;
                for (const auto& actions : lowered.ranks)
                    for (const action& a : actions) comm += ws::is_comm(a.kind) ? 1 : 0;
                CHECK(comm == 4 * static_cast<std::size_t>(ranks - 1) * static_cast<std::size_t>(m));
            }
        }
    }
}

TEST_CASE("generate(schedule_kind) dispatches to the policy", "[sched][schedule]") {
    CHECK(ws::generate(ws::gpipe::kind, 4, 6) == ws::gpipe::generate(4, 6));
    CHECK(ws::generate(ws::one_f_one_b::kind, 4, 6) == ws::one_f_one_b::generate(4, 6));
    CHECK(ws::gpipe::generate(4, 6) != ws::one_f_one_b::generate(4, 6));
    CHECK(ws::gpipe::name == "gpipe");
    CHECK(ws::one_f_one_b::name == "1f1b");
    CHECK_THROWS_AS(ws::generate(weft::schedule_kind{}, 2, 2), weft::error);
}

TEST_CASE("generators reject bad sizes, naming the parameter", "[sched][gpipe][1f1b]") {
    using Catch::Contains;
    for (auto kind : {ws::gpipe::kind, ws::one_f_one_b::kind}) {
        CHECK_THROWS_WITH(ws::generate(kind, 0, 4), Contains("ranks = 0") && Contains(">= 1"));
        CHECK_THROWS_WITH(ws::generate(kind, -3, 4), Contains("ranks = -3"));
        CHECK_THROWS_WITH(ws::generate(kind, 2, 0), Contains("microbatches = 0") && Contains(">= 1"));
        CHECK_THROWS_WITH(ws::generate(kind, 1 << 16, 1 << 16),
                          Contains("microbatches = 65536") && Contains("ranks * microbatches"));
    }
    CHECK_THROWS_WITH(ws::one_f_one_b::generate(4, 3),
                      Contains("microbatches = 3") && Contains(">= the number of pipeline stages (4)"));
    CHECK_NOTHROW(ws::gpipe::generate(4, 3));
}
