// The learning-rate schedule: linear warmup, cosine decay, the floor after it, and its
// argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "weft/core/error.hpp"
#include "weft/train/lr_schedule.hpp"

using weft::train::lr_schedule;

TEST_CASE("warmup rises linearly to the peak, the cosine falls to the floor and stays there", "[train][lr]") {
    const lr_schedule s{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .decay_steps = 14};
    CHECK(s.at(0) == Approx(0.25));
    CHECK(s.at(1) == Approx(0.5));
    CHECK(s.at(3) == Approx(1.0));
    CHECK(s.at(4) == Approx(1.0));  // the cosine starts at its top
    // Halfway through the decay the cosine is at its middle.
    CHECK(s.at(9) == Approx(0.55));
    CHECK(s.at(6) == Approx(0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.2))));
    CHECK(s.at(13) > 0.1);
    CHECK(s.at(14) == Approx(0.1));
    CHECK(s.at(1000) == Approx(0.1));
    // It only falls after the warmup.
    for (long long step = 4; step < 20; ++step) CHECK(s.at(step + 1) <= s.at(step));
}

TEST_CASE("without warmup or decay the rate is constant", "[train][lr]") {
    const lr_schedule constant{.lr = 3e-4, .min_lr = 3e-4};
    for (long long step : {0LL, 1LL, 100LL}) CHECK(constant.at(step) == 3e-4);
    const lr_schedule warmup_only{.lr = 2.0, .min_lr = 2.0, .warmup_steps = 2};
    CHECK(warmup_only.at(0) == 1.0);
    CHECK(warmup_only.at(5) == 2.0);
}

TEST_CASE("a schedule names what is wrong with it", "[train][lr]") {
    CHECK_THROWS_WITH((lr_schedule{.lr = INFINITY}.validate()), Catch::Contains("lr = inf is invalid"));
    CHECK_THROWS_WITH((lr_schedule{.lr = 1.0, .min_lr = 2.0}.validate()),
                      Catch::Contains("min_lr = 2 is invalid: must be finite, positive and at most lr"));
    CHECK_THROWS_WITH((lr_schedule{.lr = 1.0, .min_lr = 1.0, .warmup_steps = -1}.validate()),
                      Catch::Contains("warmup_steps = -1 is invalid"));
    // A decay to min_lr that would end before the warmup does is refused, not skipped.
    CHECK_THROWS_WITH((lr_schedule{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .decay_steps = 4}.validate()),
                      Catch::Contains("decay_steps = 4 is invalid: must be above warmup_steps = 4"));
    CHECK_THROWS_WITH((lr_schedule{.lr = 1.0, .min_lr = 0.1}.validate()), Catch::Contains("decay_steps = 0"));
    CHECK_NOTHROW((lr_schedule{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .decay_steps = 5}.validate()));
    CHECK_NOTHROW((lr_schedule{.lr = 1.0, .min_lr = 1.0, .warmup_steps = 4}.validate()));  // no decay asked for
}
