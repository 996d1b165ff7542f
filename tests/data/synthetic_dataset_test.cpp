// The synthetic classification data set: a sample is a function of its index alone.
#include "weft/data/synthetic_dataset.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

TEST_CASE("the synthetic data set depends on the sample index only") {
    const weft::data::synthetic_dataset data(5, 3, 11);
    const auto whole = data.batch(1, 8);      // samples 8..15
    const auto halves = data.batch(2, 4);     // samples 8..11
    CHECK(std::equal(halves.inputs.begin(), halves.inputs.end(), whole.inputs.begin()));
    CHECK(std::equal(halves.labels.begin(), halves.labels.end(), whole.labels.begin()));
    // Labels use more than one class and stay in range.
    const auto big = data.batch(0, 300);
    std::vector<int> counts(3);
    for (const int label : big.labels) {
        REQUIRE(label >= 0);
        REQUIRE(label < 3);
        ++counts[label];
    }
    for (const int count : counts) CHECK(count > 30);
    CHECK_THROWS_WITH(weft::data::synthetic_dataset(0, 3, 1), Catch::Contains("input_dim = 0"));
    CHECK_THROWS_WITH(data.batch(-1, 4), Catch::Contains("step = -1"));
}
