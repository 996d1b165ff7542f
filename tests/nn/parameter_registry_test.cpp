// The parameter registry lays tensors out back to back and finds them by name.
#include <catch2/catch.hpp>

#include "weft/core/parameter_registry.hpp"

using weft::parameter_registry;

TEST_CASE("tensors are laid out back to back in insertion order", "[nn][registry]") {
    parameter_registry registry;
    CHECK(registry.add("a.weight", {3, 4}) == 0);
    CHECK(registry.add("a.bias", {4}) == 12);
    CHECK(registry.add("b.weight", {2, 2}) == 16);
    CHECK(registry.total_size() == 20);
    REQUIRE(registry.entries().size() == 3);
    CHECK(registry.entries()[1].name == "a.bias");
    const auto& b = registry.find("b.weight");
    CHECK(b.offset == 16);
    CHECK(b.size == 4);
    CHECK(b.shape == std::vector<int>{2, 2});
    CHECK(registry.contains("a.bias"));
    CHECK_FALSE(registry.contains("c"));
}

TEST_CASE("registry rejects bad names and shapes", "[nn][registry]") {
    parameter_registry registry;
    registry.add("w", {2});
    CHECK_THROWS_WITH(registry.find("nope"), Catch::Contains("\"nope\"") && Catch::Contains("not registered"));
    CHECK_THROWS_WITH(registry.add("w", {3}), Catch::Contains("already registered"));
    CHECK_THROWS_AS(registry.add("", {3}), weft::error);
    CHECK_THROWS_AS(registry.add("x", {}), weft::error);
    CHECK_THROWS_WITH(registry.add("y", {2, 0}), Catch::Contains("shape of y") && Catch::Contains("= 0"));
    CHECK(registry.total_size() == 2);  // failed adds leave no trace
    CHECK(registry.entries().size() == 1);
}
