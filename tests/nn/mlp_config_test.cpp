// mlp_config::validate names the field that is wrong.
#include <catch2/catch.hpp>

#include "weft/nn/mlp_config.hpp"

using weft::nn::mlp_config;

TEST_CASE("a sound config validates", "[nn][config]") {
    const mlp_config config{.input_dim = 3, .hidden_dim = 8, .num_blocks = 0, .num_classes = 2};
    CHECK_NOTHROW(config.validate());
    CHECK(config.num_units() == 2);
    CHECK(config.expansion == 4);
}

TEST_CASE("each bad field is named in the error", "[nn][config]") {
    const mlp_config good{.input_dim = 3, .hidden_dim = 8, .num_blocks = 2, .num_classes = 4};
    auto with = [&](auto change) {
        mlp_config c = good;
        change(c);
        return c;
    };
    CHECK_THROWS_WITH(with([](mlp_config& c) { c.input_dim = 0; }).validate(), Catch::Contains("input_dim = 0"));
    CHECK_THROWS_WITH(with([](mlp_config& c) { c.hidden_dim = -1; }).validate(), Catch::Contains("hidden_dim = -1"));
    CHECK_THROWS_WITH(with([](mlp_config& c) { c.num_blocks = -2; }).validate(), Catch::Contains("num_blocks = -2"));
    CHECK_THROWS_WITH(with([](mlp_config& c) { c.num_classes = 1; }).validate(), Catch::Contains("num_classes = 1"));
    CHECK_THROWS_WITH(with([](mlp_config& c) { c.expansion = 0; }).validate(), Catch::Contains("expansion = 0"));
}
