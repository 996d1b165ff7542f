#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "weft/core/rng.hpp"

using weft::rng::philox4x32;

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors") {
    // kat_vectors from Random123 1.09 (philox4x32_10).
    CHECK(philox4x32({0, 0, 0, 0}, {0, 0}) ==
          weft::rng::philox_counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
    CHECK(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
          weft::rng::philox_counter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
    CHECK(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
          weft::rng::philox_counter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
    // The generator is usable at compile time.
    static_assert(philox4x32({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5);
}

TEST_CASE("values depend only on seed, tensor name and element index") {
    // Same coordinates, any order of drawing: same value.
    const float a = weft::rng::normal(7, "blocks.3.fc1.weight", 12345);
    CHECK(weft::rng::normal(7, "blocks.0.fc1.weight", 0) != a);
    CHECK(weft::rng::normal(7, "blocks.3.fc1.weight", 12345) == a);
    CHECK(weft::rng::normal(8, "blocks.3.fc1.weight", 12345) != a);
    CHECK(weft::rng::normal(7, "blocks.3.fc1.weight", 12346) != a);
    // Large indices use the high counter word.
    CHECK(weft::rng::uniform(7, "w", 1ull << 32) != weft::rng::uniform(7, "w", 0));
}

TEST_CASE("uniform and normal have the right moments") {
    constexpr int n = 200000;
    double sum_u = 0, sum_n = 0, sum_n2 = 0;
    float min_u = 1, max_u = 0;
    for (int i = 0; i < n; ++i) {
        const float u = weft::rng::uniform(1, "moments", i);
        const double z = weft::rng::normal(1, "moments", i);
        min_u = std::min(min_u, u);
        max_u = std::max(max_u, u);
        sum_u += u;
        sum_n += z;
        sum_n2 += z * z;
    }
    CHECK(min_u >= 0.0f);
    CHECK(max_u < 1.0f);
    CHECK(sum_u / n == Approx(0.5).margin(0.005));
    CHECK(sum_n / n == Approx(0.0).margin(0.01));
    CHECK(sum_n2 / n == Approx(1.0).margin(0.01));
}
