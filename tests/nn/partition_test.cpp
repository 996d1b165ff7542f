// partition_units: contiguous, as even as possible, earlier stages take the remainder.
#include <catch2/catch.hpp>

#include "weft/nn/partition.hpp"

using weft::nn::partition_units;
using weft::nn::unit_range;

TEST_CASE("units are split contiguously and evenly", "[nn][partition]") {
    CHECK(partition_units(6, 1) == std::vector<unit_range>{{0, 6}});
    CHECK(partition_units(6, 3) == std::vector<unit_range>{{0, 2}, {2, 4}, {4, 6}});
    CHECK(partition_units(7, 3) == std::vector<unit_range>{{0, 3}, {3, 5}, {5, 7}});
    CHECK(partition_units(8, 3) == std::vector<unit_range>{{0, 3}, {3, 6}, {6, 8}});
    CHECK(partition_units(4, 4) == std::vector<unit_range>{{0, 1}, {1, 2}, {2, 3}, {3, 4}});
    for (int units = 1; units <= 12; ++units)
        for (int stages = 1; stages <= units; ++stages) {
            const auto parts = partition_units(units, stages);
            REQUIRE(int(parts.size()) == stages);
            CHECK(parts.front().first == 0);
            CHECK(parts.back().last == units);
            for (std::size_t s = 0; s < parts.size(); ++s) {
                CHECK(parts[s].size() >= 1);
                CHECK(parts[s].size() <= parts[0].size());
                CHECK(parts[0].size() - parts[s].size() <= 1);
                if (s > 0) CHECK(parts[s].first == parts[s - 1].last);
            }
        }
}

TEST_CASE("impossible partitions are errors", "[nn][partition]") {
    CHECK_THROWS_WITH(partition_units(4, 0), Catch::Contains("stages = 0"));
    CHECK_THROWS_WITH(partition_units(4, 5), Catch::Contains("stages = 5") && Catch::Contains("[1, num_units = 4]"));
    CHECK_THROWS_WITH(partition_units(0, 1), Catch::Contains("num_units = 0"));
}
