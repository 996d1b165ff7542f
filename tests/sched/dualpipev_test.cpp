// DualPipeV: V placement, the reference order with its OVERLAP_F_B pairs, validity for every
// small size, and its bubble and memory at unit costs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/dualpipev.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;
using ws::action;
using ws::action_kind;

namespace {

constexpr ws::program dualpipev_program(int ranks, int microbatches) {
    return ws::dualpipev::generate({.ranks = ranks, .microbatches = microbatches, .chunks = 2});
}

}  // namespace

static_assert(ws::dualpipev::name == "dualpipev");
static_assert(ws::valid(dualpipev_program(3, 6)));
static_assert(ws::valid(ws::lower(dualpipev_program(3, 6))));
static_assert(ws::valid(ws::lower(dualpipev_program(2, 7))));

TEST_CASE("dualpipev places its two chunks per rank in a V", "[sched][dualpipev]") {
    const auto p = dualpipev_program(3, 6);
    CHECK(p.num_ranks == 3);
    CHECK(p.num_stages == 6);
    CHECK_FALSE(p.lowered);
    CHECK(p.stage_rank == std::vector<int>{0, 1, 2, 2, 1, 0});
}

// The expected texts are what PyTorch's ScheduleDualPipeV._calculate_single_rank_operations
// (a port of DeepSeek's dualpipev.py) yields for these sizes.
TEST_CASE("dualpipev reproduces PyTorch's ScheduleDualPipeV order", "[sched][dualpipev]") {
    CHECK(ws::to_text(dualpipev_program(2, 4)) ==
          "rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1)OVERLAP_F_B (3F2;0B0)OVERLAP_F_B 3B2 "
          "(3F3;0B1)OVERLAP_F_B 3B3 0I2 0W2 0I3 0W3\n"
          "rank 1: 1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B (1F3;2B1)OVERLAP_F_B "
          "(2F3;1B1)OVERLAP_F_B 2B2 1B2 2I3 1I3 2W3 1W3\n");
    CHECK(ws::to_text(dualpipev_program(3, 6)) ==
          "rank 0: 0F0 0F1 0F2 0F3 0F4 5F0 5I0 5W0 5F1 5I1 5W1 5F2 (0F5;5B2)OVERLAP_F_B "
          "(5F3;0B0)OVERLAP_F_B 5B3 (5F4;0B1)OVERLAP_F_B 5B4 (5F5;0B2)OVERLAP_F_B 5B5 0I3 0W3 "
          "0I4 0W4 0I5 0W5\n"
          "rank 1: 1F0 1F1 1F2 4F0 1F3 4F1 4I0 4W0 4F2 (1F4;4B1)OVERLAP_F_B (4F3;1B0)OVERLAP_F_B "
          "(1F5;4B2)OVERLAP_F_B (4F4;1B1)OVERLAP_F_B 4B3 (4F5;1B2)OVERLAP_F_B 4B4 1B3 4I5 1I4 "
          "4W5 1I5 1W4 1W5\n"
          "rank 2: 2F0 3F0 2F1 3F1 2F2 3F2 2F3 3B0 (3F3;2B0)OVERLAP_F_B (2F4;3B1)OVERLAP_F_B "
          "(3F4;2B1)OVERLAP_F_B (2F5;3B2)OVERLAP_F_B (3F5;2B2)OVERLAP_F_B 3B3 2B3 3B4 2I4 3I5 "
          "2I5 2W4 3W5 2W5\n");
}

TEST_CASE("dualpipev is valid and complete for every small size, with overlapped pairs", "[sched][dualpipev]") {
    for (int ranks = 1; ranks <= 16; ++ranks) {
        for (int m = 2 * ranks; m <= 64; ++m) {
            INFO("ranks = " << ranks << ", microbatches = " << m);
            const auto p = dualpipev_program(ranks, m);

            // Counting an OVERLAP_F_B as its two parts: every (stage, micro-batch) has one F
            // and either one B or one I plus one W. Counted first and checked once: a CHECK
            // per action would dominate the run time.
            const std::size_t cells = static_cast<std::size_t>(2 * ranks * m);
            std::vector<int> f(cells), b(cells), i(cells), w(cells);
            bool on_own_rank = true;
            bool pairs_cross_chunks = true;  // a pair is one chunk's F with the other's B
            std::string unexpected;
            for (int r = 0; r < ranks; ++r) {
                int overlaps = 0;
                const auto count = [&](const action& a) {
                    on_own_rank = on_own_rank && p.stage_rank[static_cast<std::size_t>(a.stage)] == r;
                    const auto cell = static_cast<std::size_t>(a.stage * m + a.microbatch);
                    switch (a.kind) {
                        case action_kind::F:
                            ++f[cell];
                            break;
                        case action_kind::B:
                            ++b[cell];
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
                };
                for (const action& a : p.ranks[static_cast<std::size_t>(r)]) {
                    if (a.kind != action_kind::OVERLAP_F_B) {
                        count(a);
                        continue;
                    }
                    ++overlaps;
                    const action fwd = ws::forward_part(a);
                    const action bwd = ws::backward_part(a);
                    pairs_cross_chunks = pairs_cross_chunks && fwd.stage != bwd.stage && bwd.kind == action_kind::B;
                    count(fwd);
                    count(bwd);
                }
                // Steady phase: two pairs per round (the last rank's very first pair is not
                // overlapped), then one pair per step of the p - r - 1 step drain.
                const int expected = 2 * (m - 2 * ranks + r + 1) + (ranks - r - 1) - (r == ranks - 1 ? 1 : 0);
                INFO("rank " << r);
                CHECK(overlaps == expected);
            }
            CHECK(on_own_rank);
            CHECK(pairs_cross_chunks);
            CHECK(unexpected.empty());
            bool complete = true;
            int splits = 0;
            for (std::size_t c = 0; c < cells; ++c) {
                complete = complete && f[c] == 1 && b[c] + i[c] == 1 && i[c] == w[c];
                splits += i[c];
            }
            CHECK(complete);
            CHECK(splits > 0);  // the cool-down splits backwards so W's fill the tail

            // lower() validates its input and throws on an invalid program, so this also
            // checks the compute-only program.
            const auto lowered = ws::lower(p);
            const auto lv = ws::check(lowered);
            INFO(lv.message);
            REQUIRE(lv.ok);

            // Unit costs, no comm latency (a pair costs the sum of its parts here): rank 0
            // starts at 0 and finishes p - 1 after its 3m of compute, so the bubble rate is
            // (p - 1) / (3m + p - 1). Each rank holds at most 2p + 1 chunk micro-batches.
            const auto sim = ws::simulate(p);
            CHECK(sim.makespan == 3.0 * m + ranks - 1);
            CHECK(sim.bubble_rate == Approx(double(ranks - 1) / (3.0 * m + ranks - 1)));
            CHECK(std::all_of(sim.busy.begin(), sim.busy.end(), [&](double x) { return x == 3.0 * m; }));
            CHECK(std::all_of(sim.peak_activations.begin(), sim.peak_activations.end(),
                              [&](double x) { return x == ranks + 0.5; }));
        }
    }
}

TEST_CASE("dualpipev rejects sizes it cannot schedule, naming the parameter", "[sched][dualpipev]") {
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(ws::dualpipev::generate({.ranks = 4, .microbatches = 5, .chunks = 2}),
                      "weft: microbatches = 5 is invalid: dualpipev needs microbatches >= 2 * "
                      "pipeline ranks (8)");
    CHECK_THROWS_WITH(ws::dualpipev::generate({.ranks = 4, .microbatches = 7, .chunks = 2}),
                      Contains("microbatches = 7 is invalid"));
    CHECK_NOTHROW(ws::dualpipev::generate({.ranks = 4, .microbatches = 8, .chunks = 2}));
    CHECK_THROWS_WITH(ws::dualpipev::generate({.ranks = 4, .microbatches = 8, .chunks = 1}),
                      Contains("chunks = 1 is invalid: dualpipev needs exactly 2 chunks per rank"));
    CHECK_THROWS_WITH(ws::dualpipev::generate({.ranks = 0, .microbatches = 8, .chunks = 2}),
                      Contains("ranks = 0 is invalid"));
    CHECK_THROWS_WITH(ws::dualpipev::generate({.ranks = 2, .microbatches = -1, .chunks = 2}),
                      Contains("microbatches = -1 is invalid"));
}
