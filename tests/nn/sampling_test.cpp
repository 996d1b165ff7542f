// Drawing tokens from logits (nn/sampling.hpp): greedy at temperature 0, only the top k
// tokens drawn, frequencies that follow the softmax, one seed one sequence, bad input refused.
#include "weft/nn/sampling.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

using Catch::Matchers::Contains;
using weft::nn::sample_token;
using weft::nn::sampling_options;

TEST_CASE("temperature 0 takes the most likely token, the lowest id on a tie", "[nn][sampling]") {
    const std::vector<float> logits{0.1f, 2.0f, -1.0f, 2.0f};
    for (std::uint64_t position = 0; position < 10; ++position)
        CHECK(sample_token(logits, {.temperature = 0, .top_k = 0, .seed = position}, position) == 1);
    // top-k 1 is greedy too, at any temperature.
    CHECK(sample_token(logits, {.temperature = 5, .top_k = 1, .seed = 3}, 7) == 1);
}

TEST_CASE("draws follow the softmax of logits / temperature, within the top k", "[nn][sampling]") {
    // Probabilities 1/2, 1/4, 1/8, 1/8 at temperature 1.
    const std::vector<float> logits{std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
    constexpr int draws = 40000;
    std::array<int, 4> counts{};
    for (int i = 0; i < draws; ++i) ++counts[std::size_t(sample_token(logits, {.temperature = 1, .seed = 11}, i))];
    // Five standard deviations of a binomial count.
    const std::array<double, 4> expected{0.5, 0.25, 0.125, 0.125};
    for (std::size_t t = 0; t < 4; ++t) {
        const double sd = std::sqrt(draws * expected[t] * (1 - expected[t]));
        CHECK(std::abs(counts[t] - draws * expected[t]) < 5 * sd);
    }
    // Top 2: only tokens 0 and 1, as 2/3 and 1/3.
    std::array<int, 4> top2{};
    for (int i = 0; i < draws; ++i)
        ++top2[std::size_t(sample_token(logits, {.temperature = 1, .top_k = 2, .seed = 11}, i))];
    CHECK(top2[2] + top2[3] == 0);
    CHECK(std::abs(top2[0] - draws * 2.0 / 3) < 5 * std::sqrt(draws * 2.0 / 9));
    // A high temperature flattens: token 3 is drawn far more often than at temperature 1.
    int hot = 0;
    for (int i = 0; i < draws; ++i) hot += sample_token(logits, {.temperature = 100, .seed = 11}, i) == 3;
    CHECK(hot > counts[3] + draws / 20);
}

TEST_CASE("one seed gives one sequence; another seed another", "[nn][sampling]") {
    std::vector<float> logits(50);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
    std::vector<int> a, b, c;
    for (std::uint64_t p = 0; p < 64; ++p) {
        a.push_back(sample_token(logits, {.temperature = 1, .top_k = 20, .seed = 5}, p));
        b.push_back(sample_token(logits, {.temperature = 1, .top_k = 20, .seed = 5}, p));
        c.push_back(sample_token(logits, {.temperature = 1, .top_k = 20, .seed = 6}, p));
    }
    CHECK(a == b);
    CHECK(a != c);
}

TEST_CASE("bad sampling input is refused, naming it", "[nn][sampling]") {
    const std::vector<float> logits{1, 2};
    CHECK_THROWS_WITH(sample_token(logits, {.temperature = -1}, 0), Contains("temperature") && Contains(">= 0"));
    CHECK_THROWS_WITH(sample_token(logits, {.temperature = std::numeric_limits<double>::infinity()}, 0),
                      Contains("temperature"));
    CHECK_THROWS_WITH(sample_token(logits, {.top_k = -2}, 0), Contains("top_k"));
    CHECK_THROWS_WITH(sample_token({}, {}, 0), Contains("logits"));
    const std::vector<float> poisoned{1, std::numeric_limits<float>::quiet_NaN()};
    CHECK_THROWS_WITH(sample_token(poisoned, {}, 0), Contains("must be finite"));
}
