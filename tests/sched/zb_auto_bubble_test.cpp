// zb-auto's bubbles in simulation against its bounds, over p in [1, 16] and m in [1, 64]
// (every m) under memory limits of 2p - 1 and p, with T_F = T_B = T_W = 1 and T_comm = 0. The
// other schedules' sweep is bubble_properties_test.cpp.
#include <catch2/catch.hpp>

#include "bubble_measure.hpp"
#include "weft/sched/zb_auto.hpp"

namespace ws = weft::sched;
using weft_test::bubble_tolerance;

TEST_CASE("zb-auto: bubble 0 under a limit of 2p-1, at most p-1 under a limit of p", "[sched][bubble]") {
    // Conditions: m >= 2p - 1 for the zero bubble, m >= p for the bound p - 1 under p.
    for (int p = 1; p <= 16; ++p) {
        for (int m = 1; m <= 64; ++m) {
            for (int limit : {2 * p - 1, p}) {
                const weft_test::measured_bubble got = weft_test::measure_bubble(
                    ws::zb_auto::generate(ws::schedule_params{.ranks = p, .microbatches = m, .memory_limit = limit}));
                INFO("zb-auto p=" << p << " m=" << m << " limit=" << limit << ": bubble " << got.bubble << ", peak "
                                  << got.peak);
                CHECK(got.peak <= limit);
                if (limit == 2 * p - 1 && m >= 2 * p - 1) CHECK(got.bubble == Approx(0).margin(bubble_tolerance));
                if (limit == p && m >= p && p > 1) CHECK(got.bubble <= p - 1 + bubble_tolerance);
            }
        }
    }
}
