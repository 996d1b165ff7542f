#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "weft/plan/cost_model.hpp"
#include "weft/plan/flat_json.hpp"
#include "weft/plan/measured_costs.hpp"

namespace {

std::filesystem::path write_fixture(const std::string& name, const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / ("weft_plan_test_" + name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

// Eight steps as train_gpt --log-json writes them; the first two are slow (warm-up).
const std::string step_log =
    "{\"step\": 0, \"loss\": 5.5, \"ms\": 400, \"tokens_per_s\": 1000, \"bubble\": 0.5, \"grad_norm\": 1.2}\n"
    "{\"step\": 1, \"loss\": 5.4, \"ms\": 300, \"tokens_per_s\": 1000, \"bubble\": 0.5, \"grad_norm\": 1.1}\n"
    "{\"step\": 2, \"loss\": 5.3, \"ms\": 100, \"tokens_per_s\": 1000, \"bubble\": 0.25}\n"
    "{\"step\": 3, \"loss\": 5.2, \"ms\": 120, \"tokens_per_s\": 1000, \"bubble\": 0.25}\n"
    "{\"step\": 4, \"loss\": 5.1, \"ms\": 80, \"tokens_per_s\": 1000, \"bubble\": 0.25}\n"
    "\n"
    "{\"step\": 5, \"loss\": null, \"ms\": 100, \"tokens_per_s\": 1000, \"bubble\": 0.25, \"nonfinite_stage\": 0}\n";

}  // namespace

TEST_CASE("a cost model reads from a JSON file, keys left out keep their defaults", "[plan][costs]") {
    const auto path = write_fixture("costs.json",
                                    "{\"forward_ms_per_sample\": 2.5, \"backward_input_ms_per_sample\": 3,\n"
                                    " \"backward_weight_ms_per_sample\": 1.5e0, \"p2p_gbytes_per_s\": 10, \"cores\": 2}\n");
    const weft::plan::cost_model c = weft::plan::load_cost_model(path.string());
    CHECK(c.forward_ms_per_sample == 2.5);
    CHECK(c.backward_input_ms_per_sample == 3);
    CHECK(c.backward_weight_ms_per_sample == 1.5);
    CHECK(c.p2p_gbytes_per_s == 10);
    CHECK(c.cores == 2);
    CHECK(c.optimizer_ns_per_element == weft::plan::cost_model{}.optimizer_ns_per_element);
    std::filesystem::remove(path);
}

TEST_CASE("a cost model's bad JSON is refused naming the key", "[plan][costs]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(weft::plan::cost_model_from_json("{\"forward_ms\": 1}", "--costs c.json"),
                      Contains("--costs c.json: key = \"forward_ms\" is invalid: is not a cost model field"));
    CHECK_THROWS_WITH(weft::plan::cost_model_from_json("{\"p2p_gbytes_per_s\": 0}", "--costs c.json"),
                      Contains("--costs c.json: p2p_gbytes_per_s = 0 is invalid: must be a finite number > 0"));
    CHECK_THROWS_WITH(weft::plan::cost_model_from_json("{\"cores\": 1.5}"), Contains("cores = 1.5 is invalid"));
    CHECK_THROWS_WITH(weft::plan::cost_model_from_json("{\"forward_ms_per_sample\": [1]}"),
                      Contains("is an object or array"));
    CHECK_THROWS_WITH(weft::plan::cost_model_from_json("{\"forward_ms_per_sample\": 1"), Contains("expected ','"));
    CHECK_THROWS_WITH(weft::plan::load_cost_model("/nonexistent/costs.json"),
                      Contains("costs file = \"/nonexistent/costs.json\" is invalid: must name a readable file"));
}

TEST_CASE("flat JSON reads numbers and skips strings, booleans and null", "[plan][costs]") {
    const auto fields = weft::plan::read_flat_json(R"({"a": -1.5e2, "b": "x,}", "c": null, "d": true, "e": 3})");
    CHECK(fields.size() == 2);
    CHECK(fields.at("a") == -150);
    CHECK(fields.at("e") == 3);
    CHECK(weft::plan::read_flat_json("{}").empty());
}

TEST_CASE("a cost model derives from a step log and its layout", "[plan][costs]") {
    const auto path = write_fixture("steps.jsonl", step_log);
    // After two warm-up steps: ms 100, 120, 80, 100 (median 100), bubble 0.25.
    const auto summary = weft::plan::summarize_step_log(step_log, 2);
    CHECK(summary.steps == 4);
    CHECK(summary.ms == 100);
    CHECK(summary.bubble == 0.25);
    // pp=2, dp=2, batch 8: busy 75 ms per rank; a replica's 4 samples over 2 ranks: the whole
    // model costs 75 * 2 * 2 / 8 = 37.5 ms a sample, a third each to F, I and W.
    weft::plan::cost_model base;
    base.p2p_latency_us = 7;
    const auto c = weft::plan::load_step_log_costs(path.string(), {.pp = 2, .dp = 2, .batch_size = 8}, base);
    CHECK(c.forward_ms_per_sample == Approx(12.5));
    CHECK(c.backward_input_ms_per_sample == Approx(12.5));
    CHECK(c.backward_weight_ms_per_sample == Approx(12.5));
    CHECK(c.p2p_latency_us == 7);
    // Four ranks on two cores ran twice slower than on a core each.
    base.cores = 2;
    CHECK(weft::plan::costs_from_step_log(step_log, {.pp = 2, .dp = 2, .batch_size = 8}, base).forward_ms_per_sample ==
          Approx(6.25));
    std::filesystem::remove(path);
}

TEST_CASE("a step log that cannot give costs is refused naming what", "[plan][costs]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(weft::plan::costs_from_step_log(step_log, {.pp = 2, .batch_size = 8, .warmup_steps = 6}),
                      Contains("step log steps = 6 is invalid: must be more than the 6 warm-up steps"));
    CHECK_THROWS_WITH(weft::plan::costs_from_step_log("{\"step\": 0, \"loss\": 1}\n", {.batch_size = 8}),
                      Contains("step log line 1 = ") && Contains("must hold \"ms\" > 0"));
    CHECK_THROWS_WITH(weft::plan::costs_from_step_log(step_log, {.pp = 0, .batch_size = 8}),
                      Contains("measured pp = 0 is invalid"));
    CHECK_THROWS_WITH(weft::plan::load_step_log_costs("/nonexistent.jsonl", {.batch_size = 8}),
                      Contains("step log = \"/nonexistent.jsonl\" is invalid: must name a readable file"));
}
