#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "weft/train/step_log.hpp"

TEST_CASE("the step log line has the fields users grep for") {
    const weft::train::step_stats stats{12, 3.48123, 41.23, 12480.4, -1};
    CHECK(weft::train::format_step(stats) == "step 12 | loss 3.4812 | 41.2 ms | 12 480 samples/s");
    const weft::train::step_stats with_bubble{3, 1.0, 2.0, 999.0, 0.079};
    CHECK(weft::train::format_step(with_bubble) == "step 3 | loss 1.0000 | 2.0 ms | 999 samples/s | bubble 7.9%");
    CHECK(weft::train::group_thousands(1234567) == "1 234 567");
    CHECK(weft::train::group_thousands(0) == "0");
}

TEST_CASE("the simulated bubble stands beside the measured one, in the line and the JSON") {
    weft::train::step_stats s{5, 2.0, 10.0, 100.0, 0.25};
    s.simulated_bubble = 0.2;
    CHECK(weft::train::format_step(s) == "step 5 | loss 2.0000 | 10.0 ms | 100 samples/s | bubble 25.0% (simulated 20.0%)");
    CHECK(weft::train::format_step_json(s) ==
          "{\"step\": 5, \"loss\": 2, \"ms\": 10, \"tokens_per_s\": -1, \"bubble\": 0.25, \"simulated_bubble\": 0.2}");
}

TEST_CASE("the step's JSON line keeps nine significant digits") {
    weft::train::step_stats stats{7, 2.718281828459, 12.5, 0, 0.25};
    stats.tokens_per_second = 1024;
    CHECK(weft::train::format_step_json(stats) ==
          "{\"step\": 7, \"loss\": 2.71828183, \"ms\": 12.5, \"tokens_per_s\": 1024, \"bubble\": 0.25}");
}

TEST_CASE("the GPT step log line has lr, tok/s, bubble and MFU") {
    weft::train::step_stats s{12, 3.48123, 41.23, 97.5, 0.079};
    s.lr = 3e-4;
    s.tokens_per_second = 12480.4;
    s.mfu = 0.312;
    CHECK(weft::train::format_step(s) ==
          "step 12 | loss 3.4812 | lr 3.0e-04 | 41.2 ms | 12 480 tok/s | bubble 7.9% | MFU 31%");
    s.grad_norm = 1.20346;
    CHECK(weft::train::format_step(s) ==
          "step 12 | loss 3.4812 | lr 3.0e-04 | norm 1.2035 | 41.2 ms | 12 480 tok/s | bubble 7.9% | MFU 31%");
    CHECK(weft::train::format_step_json(s).find("\"grad_norm\": 1.20346}") != std::string::npos);
    s.grad_norm = std::nan("");
    CHECK(weft::train::format_step_json(s).find("\"grad_norm\": null}") != std::string::npos);
    // The step's end on the run's clock: logged where known, not printed.
    s.ended_seconds = 12.5;
    CHECK(weft::train::format_step_json(s).find("\"grad_norm\": null, \"ended_s\": 12.5}") != std::string::npos);
    CHECK(weft::train::format_step(s).find("12.5") == std::string::npos);
}

TEST_CASE("a step that was not applied says where it turned non-finite, and its JSON stays JSON") {
    weft::train::step_stats s{4, std::nan(""), 10.0, 0, 0.5};
    s.tokens_per_second = 100;
    s.nonfinite_stage = 2;
    CHECK_FALSE(s.applied());
    CHECK(weft::train::format_step(s) ==
          "step 4 | loss nan | 10.0 ms | 100 tok/s | bubble 50.0% | not applied: non-finite from stage 2");
    // Not "-nan" or "inf": JSON has neither, so the value is null.
    CHECK(weft::train::format_step_json(s) ==
          "{\"step\": 4, \"loss\": null, \"ms\": 10, \"tokens_per_s\": 100, \"bubble\": 0.5, \"nonfinite_stage\": 2}");
    s.loss = -std::numeric_limits<double>::infinity();
    CHECK(weft::train::format_step_json(s).find("\"loss\": null") != std::string::npos);
}
