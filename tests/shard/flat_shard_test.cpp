// shard::shard_of: equal contiguous ranges over the padded buffer, and which of their
// elements are real.
#include <catch2/catch.hpp>

#include "weft/core/error.hpp"
#include "weft/shard/flat_shard.hpp"
#include "weft/shard/zero_memory.hpp"

using weft::shard::shard_of;

TEST_CASE("shard_of cuts the padded buffer into equal ranges", "[shard]") {
    const std::size_t valid[] = {3, 3, 3, 1};
    for (int r = 0; r < 4; ++r) {
        const auto s = shard_of(10, 4, r);
        CHECK(s.total == 10);
        CHECK(s.padded == 12);
        CHECK(s.size == 3);
        CHECK(s.offset == 3 * std::size_t(r));
        CHECK(s.valid() == valid[r]);
    }
    // Fewer elements than ranks: the last ranks hold padding only.
    CHECK(shard_of(2, 4, 1).valid() == 1);
    CHECK(shard_of(2, 4, 2).valid() == 0);
    CHECK(shard_of(2, 4, 3).valid() == 0);
    CHECK(shard_of(12, 4, 3).valid() == 3);
    CHECK(shard_of(7, 1, 0).size == 7);
    CHECK_THROWS_AS(shard_of(10, 0, 0), weft::error);
    CHECK_THROWS_WITH(shard_of(10, 4, 4), Catch::Matchers::Contains("rank") && Catch::Matchers::Contains("[0, 4)"));
}

TEST_CASE("zero_memory_of gives each ZeRO stage's table", "[shard]") {
    // Psi = 10, n = 4, rank 3: s = 3, padded 12, v = 1; AdamW (2 states), fp32.
    const auto z0 = weft::shard::zero_memory_of(0, 10, 4, 3, 2, 4);
    CHECK(z0.between_steps.parameters == 40);
    CHECK(z0.between_steps.gradients == 40);
    CHECK(z0.between_steps.optimizer_state == 80);
    const auto z1 = weft::shard::zero_memory_of(1, 10, 4, 3, 2, 4);
    CHECK(z1.between_steps.parameters == 48);
    CHECK(z1.between_steps.gradients == 48);
    CHECK(z1.between_steps.optimizer_state == 8);
    CHECK(z1.peak.gradients == 60);
    const auto z2 = weft::shard::zero_memory_of(2, 10, 4, 3, 2, 4);
    CHECK(z2.between_steps.gradients == 0);
    CHECK(z2.peak.gradients == 60);
    const auto z3 = weft::shard::zero_memory_of(3, 10, 4, 3, 2, 4);
    CHECK(z3.between_steps.parameters == 12);
    CHECK(z3.peak.parameters == 60);
    CHECK_THROWS_WITH(weft::shard::zero_memory_of(4, 10, 4, 0, 2, 4), Catch::Matchers::Contains("zero_stage"));
}
