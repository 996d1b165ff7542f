// partition_units: contiguous, as even as possible, earlier stages take the remainder.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

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

TEST_CASE("partition_by_cost minimises the most expensive stage", "[nn][partition]") {
    using weft::nn::partition_by_cost;
    // Equal costs: exactly the even split.
    for (int units = 1; units <= 12; ++units)
        for (int stages = 1; stages <= units; ++stages) {
            const std::vector<double> equal(std::size_t(units), 1.0);
            INFO(units << " units, " << stages << " stages");
            CHECK(partition_by_cost(equal, stages) == partition_units(units, stages));
        }
    // GPT-like: a cheap embedding and head around 4 blocks, 4 stages. Unit counts would
    // give 2, 2, 1, 1 (one stage with two blocks); costs give every stage one block.
    const std::vector<double> small_vocab{0.01, 1, 1, 1, 1, 0.1};
    CHECK(partition_by_cost(small_vocab, 4) == std::vector<unit_range>{{0, 2}, {2, 3}, {3, 4}, {4, 6}});
    // A head as dear as five blocks (GPT-2's 50257-token vocabulary) gets a stage of its own.
    std::vector<double> big_vocab(14, 1.0);
    big_vocab.front() = 0.01;
    big_vocab.back() = 5.5;
    const auto parts = partition_by_cost(big_vocab, 4);
    CHECK(parts.back() == unit_range{13, 14});
    double most = 0;
    for (const auto& r : parts) {
        double c = 0;
        for (int u = r.first; u < r.last; ++u) c += big_vocab[std::size_t(u)];
        most = std::max(most, c);
    }
    CHECK(most == Approx(5.5));
    // Every stage keeps at least one unit, even of zero cost.
    const std::vector<double> zeros{0, 0, 0, 5};
    CHECK(partition_by_cost(zeros, 4) == partition_units(4, 4));
    CHECK_THROWS_WITH(partition_by_cost(zeros, 5), Catch::Contains("stages = 5"));
    const std::vector<double> negative{1, -1};
    CHECK_THROWS_WITH(partition_by_cost(negative, 1), Catch::Contains("unit cost"));
}
