// zb-h2: the zero-bubble paper's handcrafted ZB-H2 (longer warm-up, zero bubble at peak 2p-1).
#include <catch2/catch.hpp>

#include "program_checks.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/validate.hpp"
#include "weft/sched/zb_h2.hpp"

namespace ws = weft::sched;
using ws::zb_h2;

static_assert(ws::valid(ws::lower(zb_h2::generate({.ranks = 4, .microbatches = 8}))));

TEST_CASE("zb-h2 is valid for every size it accepts", "[sched][zb_h2]") {
    for (int p = 1; p <= 16; ++p)
        for (int m : weft_test::sampled_microbatches())
            if (m >= 2 * p - 1)
                weft_test::check_program(zb_h2::generate({.ranks = p, .microbatches = m}), p, m, 1,
                                         weft_test::backward_form::split, weft_test::own_rank);
}

TEST_CASE("zb-h2 warms up with 2p-1-2r forwards and piles W's at the end", "[sched][zb_h2]") {
    CHECK(ws::to_text(zb_h2::generate({.ranks = 2, .microbatches = 3})) ==
          "rank 0: 0F0 0F1 0F2 0I0 0W0 0I1 0W1 0I2 0W2\n"
          "rank 1: 1F0 1I0 1F1 1I1 1F2 1I2 1W0 1W1 1W2\n");
    for (int p = 1; p <= 8; ++p) {
        const auto prog = zb_h2::generate({.ranks = p, .microbatches = 3 * p});
        for (int r = 0; r < p; ++r) {
            const auto& actions = prog.ranks[static_cast<std::size_t>(r)];
            int warmup = 0;
            while (actions[static_cast<std::size_t>(warmup)].kind == ws::action_kind::F) ++warmup;
            CHECK(warmup == 2 * p - 1 - 2 * r);
        }
    }
}

TEST_CASE("zb-h2 has no bubble at unit costs and peaks at 2p-1", "[sched][zb_h2]") {
    for (int p = 1; p <= 10; ++p)
        for (int m = 2 * p - 1; m <= 4 * p; ++m) {
            INFO("p = " << p << ", m = " << m);
            const auto r = weft_test::unit_replay(zb_h2::generate({.ranks = p, .microbatches = m}));
            CHECK(r.bubble == Approx(0).margin(1e-9));
            CHECK(r.peak[0] == Approx(2 * p - 1).margin(1e-9));
            for (double peak : r.peak) CHECK(peak <= 2 * p - 1 + 1e-9);
        }
}

TEST_CASE("zb-h2 rejects sizes it cannot run", "[sched][zb_h2]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(zb_h2::generate({.ranks = 4, .microbatches = 6}),
                      Contains("microbatches = 6") && Contains(">= 2 * ranks - 1 = 7"));
    CHECK_NOTHROW(zb_h2::generate({.ranks = 4, .microbatches = 7}));
    CHECK_THROWS_WITH(zb_h2::generate({.ranks = 4, .microbatches = 8, .chunks = 3}), Contains("chunks = 3"));
    CHECK_THROWS_WITH(zb_h2::generate({.ranks = 2, .microbatches = 0}), Contains("microbatches = 0"));
}
