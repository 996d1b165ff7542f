// The operation profile's host side (weft/exec/operation_times.hpp): totals summed by name
// in the order names first appear, and the table train_gpt --kernel-profile prints, per
// step, the longest first, with the sum and the rest of the step.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/exec/operation_times.hpp"

using weft::operation_time;

TEST_CASE("operation times add up by name, new names at the end", "[exec][operation_times]") {
    std::vector<operation_time> totals = {{"gemm", 2, 3.0}};
    weft::accumulate_operation_times(totals, {{"attention_forward", 1, 5.0}, {"gemm", 3, 1.5}});
    REQUIRE(totals.size() == 2);
    CHECK(totals[0].name == "gemm");
    CHECK(totals[0].calls == 5);
    CHECK(totals[0].milliseconds == 4.5);
    CHECK(totals[1].name == "attention_forward");
    CHECK(totals[1].calls == 1);
    CHECK(totals[1].milliseconds == 5.0);
}

TEST_CASE("the table is per step, longest first, with the sum and the rest of the step", "[exec][operation_times]") {
    // Two steps of 10 ms each: 4 ms of layer norms and 12 ms of GEMMs in all.
    const auto lines = weft::format_operation_times({{"layer_norm_forward", 4, 4.0}, {"gemm 8x8x8", 6, 12.0}}, 2, 10.0);
    REQUIRE(lines.size() == 5);
    CHECK(lines[0].find("operation (per step)") == 0);
    CHECK(lines[1].find("gemm 8x8x8") == 0);
    CHECK(lines[1].find(" 3.0 ") != std::string::npos);    // calls per step
    CHECK(lines[1].find(" 6.000 ") != std::string::npos);  // ms per step
    CHECK(lines[1].find(" 60.0%") != std::string::npos);
    CHECK(lines[2].find("layer_norm_forward") == 0);
    CHECK(lines[2].find(" 2.000 ") != std::string::npos);
    CHECK(lines[3].find("all of the above") == 0);
    CHECK(lines[3].find(" 8.000 ") != std::string::npos);
    CHECK(lines[3].find(" 80.0%") != std::string::npos);
    CHECK(lines[4].find("the rest of the step") == 0);
    CHECK(lines[4].find(" 2.000 ") != std::string::npos);
}

TEST_CASE("a table of no steps or no step time is refused by name", "[exec][operation_times]") {
    CHECK_THROWS_WITH(weft::format_operation_times({}, 0, 10.0),
                      Catch::Contains("format_operation_times: steps = 0 is invalid: must be positive"));
    CHECK_THROWS_WITH(weft::format_operation_times({}, 1, 0.0),
                      Catch::Contains("format_operation_times: step_milliseconds = 0 is invalid"));
}
