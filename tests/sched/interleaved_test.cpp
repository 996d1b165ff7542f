// interleaved: Megatron-LM's / PyTorch's interleaved 1F1B over v looped chunks.
#include <catch2/catch.hpp>

#include <string>

#include "program_checks.hpp"
#include "weft/sched/interleaved.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;
using ws::interleaved;
using ws::schedule_params;

static_assert(ws::valid(ws::lower(interleaved::generate({.ranks = 4, .microbatches = 8, .chunks = 2}))));
static_assert(ws::valid(ws::lower(interleaved::generate({.ranks = 3, .microbatches = 7, .chunks = 3}))));
static_assert(interleaved::default_group_size(4, 8) == 4);
static_assert(interleaved::default_group_size(4, 10) == 5);   // 10 % 4 = 2 < 4; 10 % 5 = 0
static_assert(interleaved::default_group_size(4, 11) == 6);   // 11 % 6 = 5 >= 4
static_assert(interleaved::default_group_size(2, 5) == 3);    // Megatron's "PP2 N3 M5" example
static_assert(interleaved::default_group_size(4, 3) == 3);    // fewer than p: one group
static_assert(interleaved::default_group_size(4, 4) == 4);

namespace {
int looped(int stage, int ranks) { return stage % ranks; }
}  // namespace

TEST_CASE("interleaved is valid for every size it accepts", "[sched][interleaved]") {
    for (int p = 1; p <= 16; ++p)
        for (int m : weft_test::sampled_microbatches())
            for (int v = 1; v <= 4; ++v) {
                if (v == 1 && m < p) continue;
                const auto prog = interleaved::generate({.ranks = p, .microbatches = m, .chunks = v});
                weft_test::check_program(prog, p, m, v, weft_test::backward_form::full,
                                         [p](int s) { return looped(s, p); });
            }
}

TEST_CASE("interleaved with one chunk is 1F1B", "[sched][interleaved]") {
    for (int p = 1; p <= 6; ++p)
        for (int m = p; m <= 12; ++m)
            CHECK(interleaved::generate({.ranks = p, .microbatches = m}) == ws::one_f_one_b::generate(p, m));
}

TEST_CASE("interleaved follows Megatron's order", "[sched][interleaved]") {
    // p = 2, m = 4, v = 2: groups of 2 micro-batches; warm-up 2(p-r-1) + (v-1)g.
    CHECK(ws::to_text(interleaved::generate({.ranks = 2, .microbatches = 4, .chunks = 2})) ==
          "rank 0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3\n"
          "rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3\n");
    // Megatron's schedule-table example (PP2, M5, VP2, group 3): forwards run
    // micro-batches 0 1 2 0 1 2 3 4 3 4 on chunks 0 0 0 1 1 1 0 0 1 1.
    const auto prog = interleaved::generate({.ranks = 2, .microbatches = 5, .chunks = 2});
    std::string forwards;
    for (const auto& a : prog.ranks[1])
        if (a.kind == ws::action_kind::F) forwards += ws::to_string(a) + " ";
    CHECK(forwards == "1F0 1F1 1F2 3F0 3F1 3F2 1F3 1F4 3F3 3F4 ");
    // An explicit group size gives the same table as the default when they agree.
    CHECK(interleaved::generate({.ranks = 2, .microbatches = 5, .chunks = 2}, 3) == prog);
    CHECK(interleaved::generate({.ranks = 2, .microbatches = 5, .chunks = 2}, 5) != prog);
}

TEST_CASE("interleaved divides the 1F1B bubble by v", "[sched][interleaved]") {
    // With T_F = T_B = T_W = 1 per rank share, 1F1B idles 3(p-1); v chunks idle 3(p-1)/v.
    for (int p = 1; p <= 8; ++p)
        for (int v = 1; v <= 4; ++v)
            for (int m = p; m <= 3 * p; m += p) {
                INFO("p = " << p << ", m = " << m << ", v = " << v);
                const auto r = weft_test::unit_replay(
                    interleaved::generate({.ranks = p, .microbatches = m, .chunks = v}));
                CHECK(r.bubble == Approx(3.0 * (p - 1) / v).margin(1e-9));
                // Megatron's peak: the warm-up forwards plus the one in flight, in chunk
                // micro-batches of 1/v each, on rank 0.
                const int warmup = std::min(m * v, 2 * (p - 1) + (v - 1) * p);
                const double expected = v == 1 ? p : std::min(m * v, warmup + 1) / double(v);
                CHECK(r.peak[0] == Approx(expected).margin(1e-9));
            }
}

TEST_CASE("interleaved rejects sizes it cannot run, naming the parameter", "[sched][interleaved]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 0, .microbatches = 4, .chunks = 2}),
                      Contains("ranks = 0"));
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 2, .microbatches = 0, .chunks = 2}),
                      Contains("microbatches = 0"));
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 2, .microbatches = 4, .chunks = 0}),
                      Contains("chunks = 0") && Contains(">= 1"));
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 4, .microbatches = 3, .chunks = 1}),
                      Contains("microbatches = 3") && Contains("chunks = 1 is 1F1B"));
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 4, .microbatches = 3, .chunks = 2}, 2),
                      Contains("group_size = 2") && Contains("valid: 3"));
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 4, .microbatches = 10, .chunks = 2}, 3),
                      Contains("group_size = 3") && Contains("[ranks, microbatches] = [4, 10]"));
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 4, .microbatches = 10, .chunks = 2}, 11),
                      Contains("group_size = 11"));
    CHECK_THROWS_WITH(interleaved::generate({.ranks = 4, .microbatches = 10, .chunks = 2}, 4),
                      Contains("group_size = 4") && Contains("microbatches % group_size = 2") &&
                          Contains("default: 5"));
    CHECK_THROWS_AS(interleaved::generate({.ranks = 4096, .microbatches = 4096, .chunks = 4}), weft::error);
}
