// ZB-V: V placement, PyTorch's order, validity for every small size, and the paper's claims
// (zero bubble at T_F = T_B = T_W once m >= 2p - 1, peak activations of p micro-batches).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/sched/validate.hpp"
#include "weft/sched/zbv.hpp"

namespace ws = weft::sched;
using ws::action;
using ws::action_kind;

namespace {

constexpr ws::program zbv_program(int ranks, int microbatches) {
    return ws::zbv::generate({.ranks = ranks, .microbatches = microbatches, .chunks = 2});
}

}  // namespace

static_assert(ws::zbv::name == "zbv");
static_assert(ws::valid(zbv_program(3, 6)));
static_assert(ws::valid(ws::lower(zbv_program(3, 6))));
static_assert(ws::valid(ws::lower(zbv_program(4, 2))));  // fewer micro-batches than the V holds

TEST_CASE("zbv places stage s on rank s going down and on rank 2p-1-s coming back up", "[sched][zbv]") {
    const auto p = zbv_program(4, 8);
    CHECK(p.num_ranks == 4);
    CHECK(p.num_stages == 8);
    CHECK(p.num_microbatches == 8);
    CHECK_FALSE(p.lowered);
    CHECK(p.stage_rank == std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0});
}

// The expected texts are what PyTorch's ScheduleZBVZeroBubble._calculate_single_rank_operations
// yields for these sizes, with its leading idle slots (None) dropped.
TEST_CASE("zbv reproduces PyTorch's ScheduleZBVZeroBubble order", "[sched][zbv]") {
    CHECK(ws::to_text(zbv_program(2, 4)) ==
          "rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 "
          "3W3 0I2 0W2 0I3 0W3\n"
          "rank 1: 1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 "
          "2I3 1I3 1W2 2W3 1W3\n");
    // m < 2p - 1: PyTorch builds the order for 2p - 1 micro-batches and drops the rest.
    CHECK(ws::to_text(zbv_program(3, 2)) ==
          "rank 0: 0F0 0F1 5F0 5I0 5W0 5F1 5I1 5W1 0I0 0W0 0I1 0W1\n"
          "rank 1: 1F0 1F1 4F0 4F1 4I0 4W0 4I1 4W1 1I0 1W0 1I1 1W1\n"
          "rank 2: 2F0 3F0 2F1 3F1 3I0 3W0 2I0 2W0 3I1 3W1 2I1 2W1\n");
}

TEST_CASE("zbv is valid, complete and zero-bubble for every small size", "[sched][zbv]") {
    for (int ranks = 1; ranks <= 16; ++ranks) {
        for (int m = 1; m <= 64; ++m) {
            INFO("ranks = " << ranks << ", microbatches = " << m);
            const auto p = zbv_program(ranks, m);

            // Every (stage, micro-batch): one F, one I, one W, never a full B, on its own rank.
            // Counted first and checked once: a CHECK per action would dominate the run time.
            const std::size_t cells = static_cast<std::size_t>(2 * ranks * m);
            std::vector<int> f(cells), i(cells), w(cells);
            bool on_own_rank = true;
            std::string unexpected;
            for (int r = 0; r < ranks; ++r) {
                for (const action& a : p.ranks[static_cast<std::size_t>(r)]) {
                    on_own_rank = on_own_rank && p.stage_rank[static_cast<std::size_t>(a.stage)] == r;
                    const auto cell = static_cast<std::size_t>(a.stage * m + a.microbatch);
                    switch (a.kind) {
                        case action_kind::F:
                            ++f[cell];
                            break;
                        case action_kind::I:
                            ++i[cell];
                            break;
                        case action_kind::W:
                            ++w[cell];
                            break;
                        default:
                            unexpected += ws::to_string(a) + " ";
                    }
                }
            }
            CHECK(on_own_rank);
            CHECK(unexpected.empty());
            const auto once = [](const std::vector<int>& counts) {
                return std::all_of(counts.begin(), counts.end(), [](int c) { return c == 1; });
            };
            CHECK(once(f));
            CHECK(once(i));
            CHECK(once(w));

            // lower() validates its input and throws on an invalid program, so this also
            // checks the compute-only program.
            const auto lowered = ws::lower(p);
            const auto lv = ws::check(lowered);
            INFO(lv.message);
            REQUIRE(lv.ok);

            // Unit costs, no comm latency: each rank computes 3m (six half-cost chunk actions
            // per micro-batch) after starting (p-1)/2 late at most. The V only fills without
            // gaps from m = 2p - 1 on; below that the bubble is real.
            const auto sim = ws::simulate(p);
            if (m >= 2 * ranks - 1) {
                CHECK(sim.bubble_rate == 0);
                CHECK(sim.makespan == 3.0 * m + (ranks - 1) / 2.0);
            } else {
                CHECK(sim.bubble_rate > 0);
            }
            // Rank 0 holds the most: 2p - 1 chunk-0 micro-batches and one of chunk 1 (p whole
            // micro-batches) before its first backward frees any; ZB-H2 would hold 2p - 1.
            CHECK(std::all_of(sim.busy.begin(), sim.busy.end(), [&](double b) { return b == 3.0 * m; }));
            CHECK(*std::max_element(sim.peak_activations.begin(), sim.peak_activations.end()) == std::min(m, ranks));
        }
    }
}

TEST_CASE("zbv keeps a valid order when communication has latency", "[sched][zbv]") {
    ws::cost_model costs;
    costs.comm = 0.25;
    const auto sim = ws::simulate(ws::lower(zbv_program(4, 8)), costs);
    CHECK(sim.makespan > 3.0 * 8);
    CHECK(sim.bubble_rate > 0);
}

TEST_CASE("zbv rejects sizes it cannot schedule, naming the parameter", "[sched][zbv]") {
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(ws::zbv::generate({.ranks = 4, .microbatches = 8, .chunks = 1}),
                      Contains("chunks = 1 is invalid: zbv needs exactly 2 chunks per rank"));
    CHECK_THROWS_WITH(ws::zbv::generate({.ranks = 4, .microbatches = 8, .chunks = 3}),
                      Contains("chunks = 3 is invalid"));
    CHECK_THROWS_WITH(ws::zbv::generate({.ranks = 0, .microbatches = 8, .chunks = 2}),
                      Contains("ranks = 0 is invalid"));
    CHECK_THROWS_WITH(ws::zbv::generate({.ranks = 4, .microbatches = 0, .chunks = 2}),
                      Contains("microbatches = 0 is invalid"));
    // The order is built for 2p - 1 micro-batches at least, so huge p is bounded too.
    CHECK_THROWS_WITH(ws::zbv::generate({.ranks = 4000, .microbatches = 1, .chunks = 2}),
                      Contains("ranks = 4000 is invalid: zbv needs ranks * max(microbatches, "
                               "2 * ranks - 1) <= 16777216"));
    CHECK_THROWS_AS(ws::zbv::generate({.ranks = 4, .microbatches = 8, .chunks = 0}), weft::error);
}
