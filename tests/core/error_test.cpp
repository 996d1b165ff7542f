#include <catch2/catch.hpp>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"

TEST_CASE("error messages name the parameter, the value and what is valid") {
    const weft::error e = weft::invalid_argument("pp", -2, "must be >= 1");
    CHECK(std::string(e.what()) == "weft: pp = -2 is invalid: must be >= 1");
    const weft::error s = weft::invalid_argument("schedule", std::string("zb"), "one of: gpipe");
    CHECK(std::string(s.what()) == "weft: schedule = \"zb\" is invalid: one of: gpipe");
    CHECK_THROWS_AS(weft::require(false, "x", 1, "y"), weft::error);
    CHECK_NOTHROW(weft::require(true, "x", 1, "y"));
}

TEST_CASE("schedule names round trip and unknown names list the valid ones") {
    for (const auto& [kind, name] : weft::schedule_names) {
        CHECK(weft::parse_schedule_kind(name) == kind);
        CHECK(weft::to_string(kind) == name);
    }
    CHECK_THROWS_WITH(weft::parse_schedule_kind("zigzag"),
                      Catch::Contains("schedule = \"zigzag\"") && Catch::Contains("gpipe, 1f1b"));
    CHECK_THROWS_AS(weft::parse_schedule_kind(""), weft::error);
    CHECK(weft::schedule_names.size() == 9);
    CHECK(weft::schedule_name_list() ==
          "gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zb-h2, zbv, dualpipev, zb-auto");
    CHECK(weft::parse_schedule_kind("looped-bfs") == weft::schedule_kind::looped_bfs);
    CHECK(weft::parse_schedule_kind("zb-auto") == weft::schedule_kind::zb_auto);
    CHECK_THROWS_WITH(weft::parse_schedule_kind("zb_h1"), Catch::Contains("zb-h1"));
    static_assert(weft::to_string(weft::schedule_kind::dualpipev) == "dualpipev");
}
