// zb-h1: the zero-bubble paper's handcrafted ZB-H1 (1F1B with I/W split, W's deferred).
#include <catch2/catch.hpp>

#include "program_checks.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/validate.hpp"
#include "weft/sched/zb_h1.hpp"

namespace ws = weft::sched;
using ws::zb_h1;

static_assert(ws::valid(ws::lower(zb_h1::generate({.ranks = 4, .microbatches = 8}))));
static_assert(ws::valid(ws::lower(zb_h1::generate({.ranks = 5, .microbatches = 5}))));

TEST_CASE("zb-h1 is valid for every size it accepts", "[sched][zb_h1]") {
    for (int p = 1; p <= 16; ++p)
        for (int m : weft_test::sampled_microbatches())
            if (m >= p)
                weft_test::check_program(zb_h1::generate({.ranks = p, .microbatches = m}), p, m, 1,
                                         weft_test::backward_form::split, weft_test::own_rank);
}

TEST_CASE("zb-h1 keeps 1F1B's order and defers rank r's first r W's", "[sched][zb_h1]") {
    // p = 2, m = 3; as PaddlePaddle's pipeline_scheduler_ZBH1 job list (B = I then W).
    CHECK(ws::to_text(zb_h1::generate({.ranks = 2, .microbatches = 3})) ==
          "rank 0: 0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2\n"
          "rank 1: 1F0 1I0 1F1 1I1 1W1 1F2 1I2 1W2 1W0\n");
    CHECK(ws::to_text(zb_h1::generate({.ranks = 4, .microbatches = 5})) ==
          "rank 0: 0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4\n"
          "rank 1: 1F0 1F1 1F2 1I0 1F3 1I1 1W1 1F4 1I2 1W2 1I3 1W3 1I4 1W4 1W0\n"
          "rank 2: 2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W2 2F4 2I3 2W3 2I4 2W4 2W0 2W1\n"
          "rank 3: 3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W3 3F4 3I4 3W4 3W0 3W1 3W2\n");
}

TEST_CASE("zb-h1's bubble is (p-1)(T_F+T_B-T_W) at 1F1B's peak", "[sched][zb_h1]") {
    for (int p = 1; p <= 10; ++p)
        for (int m = p; m <= 3 * p + 2; ++m) {
            INFO("p = " << p << ", m = " << m);
            const auto r = weft_test::unit_replay(zb_h1::generate({.ranks = p, .microbatches = m}));
            CHECK(r.bubble == Approx(p - 1).margin(1e-9));
            CHECK(r.peak[0] == Approx(p).margin(1e-9));
            for (double peak : r.peak) CHECK(peak <= p + 1e-9);
        }
}

TEST_CASE("zb-h1 rejects sizes it cannot run", "[sched][zb_h1]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(zb_h1::generate({.ranks = 4, .microbatches = 3}),
                      Contains("microbatches = 3") && Contains(">= ranks (4)"));
    CHECK_THROWS_WITH(zb_h1::generate({.ranks = 4, .microbatches = 8, .chunks = 2}),
                      Contains("chunks = 2") && Contains("valid: 1"));
    CHECK_THROWS_WITH(zb_h1::generate({.ranks = 0, .microbatches = 8}), Contains("ranks = 0"));
}
