#include <catch2/catch.hpp>

#include "weft/core/error.hpp"

TEST_CASE("error messages name the parameter, the value and what is valid") {
    const weft::error e = weft::invalid_argument("pp", -2, "must be >= 1");
    CHECK(std::string(e.what()) == "weft: pp = -2 is invalid: must be >= 1");
    const weft::error s = weft::invalid_argument("schedule", std::string("zb"), "one of: gpipe");
    CHECK(std::string(s.what()) == "weft: schedule = \"zb\" is invalid: one of: gpipe");
    CHECK_THROWS_AS(weft::require(false, "x", 1, "y"), weft::error);
    CHECK_NOTHROW(weft::require(true, "x", 1, "y"));
}

TEST_CASE("unprefixed quotes a weft::error's message without its prefix", "[core]") {
    CHECK(weft::unprefixed(weft::error("--steps = 0 is invalid")) == "--steps = 0 is invalid");
    CHECK(weft::unprefixed(std::runtime_error("not weft's")) == "not weft's");
    CHECK(weft::unprefixed(std::string_view("weft: weft: twice")) == "weft: twice");  // one prefix only
    CHECK(weft::error(weft::unprefixed(weft::error("again"))).what() == std::string("weft: again"));
}
