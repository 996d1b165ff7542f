// train/simulated_bubble.hpp: the step log's simulated bubble is the timed simulator's for the
// measured costs, in the step log's terms.
#include <catch2/catch.hpp>

#include <vector>

#include "weft/sched/all_schedules.hpp"
#include "weft/sched/lower.hpp"
#include "weft/train/simulated_bubble.hpp"

TEST_CASE("1F1B at F 1, B 2 per micro-batch idles 3 of 15 time units on each of 2 ranks", "[train][bubble]") {
    const auto program = weft::sched::lower(weft::sched::one_f_one_b{}.generate({.ranks = 2, .microbatches = 4}));
    // Per rank: 4 forwards of 1 and 4 full backwards of 2 (B's T_B + T_W).
    const std::vector<double> costs{4, 8, 0, 0, 4, 8, 0, 0};
    // Makespan m (F + B) + (p - 1)(F + B) = 12 + 3 = 15; each rank busy 12.
    CHECK(weft::train::simulated_bubble(program, costs) == Approx(0.2));
}

TEST_CASE("a slower rank idles the others: the simulator sees per-rank costs", "[train][bubble]") {
    const auto program = weft::sched::lower(weft::sched::gpipe{}.generate({.ranks = 2, .microbatches = 2}));
    const std::vector<double> even{2, 4, 0, 0, 2, 4, 0, 0};
    const std::vector<double> uneven{2, 4, 0, 0, 6, 12, 0, 0};  // rank 1 three times slower
    CHECK(weft::train::simulated_bubble(program, uneven) > weft::train::simulated_bubble(program, even));
}

TEST_CASE("split backwards are simulated as I and W", "[train][bubble]") {
    const auto program = weft::sched::lower(weft::sched::zb_h1{}.generate({.ranks = 2, .microbatches = 4}));
    const std::vector<double> costs{4, 0, 4, 4, 4, 0, 4, 4};
    const double bubble = weft::train::simulated_bubble(program, costs);
    CHECK(bubble > 0);
    CHECK(bubble < weft::train::simulated_bubble(
                       weft::sched::lower(weft::sched::one_f_one_b{}.generate({.ranks = 2, .microbatches = 4})),
                       std::vector<double>{4, 8, 0, 0, 4, 8, 0, 0}));
}

TEST_CASE("no simulated bubble where forwards were not timed, or the costs do not fit", "[train][bubble]") {
    const auto program = weft::sched::lower(weft::sched::gpipe{}.generate({.ranks = 2, .microbatches = 2}));
    CHECK(weft::train::simulated_bubble(program, std::vector<double>(8, 0.0)) == -1);
    CHECK(weft::train::simulated_bubble(program, std::vector<double>(4, 1.0)) == -1);
}
