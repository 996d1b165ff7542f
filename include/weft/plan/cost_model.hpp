// What the planner prices a layout with: per-action compute times of the whole model per
// sample, the optimizer's step per element, and the links' latency and bandwidth. Given as a
// struct, read from a small JSON file whose keys are the field names
//
//   {"forward_ms_per_sample": 2.1, "backward_input_ms_per_sample": 2.0,
//    "backward_weight_ms_per_sample": 2.2, "optimizer_ns_per_element": 1.5,
//    "p2p_latency_us": 30, "p2p_gbytes_per_s": 8, "allreduce_latency_us": 40,
//    "allreduce_gbytes_per_s": 6, "cores": 0}
//
// (keys left out keep their defaults), or derived from a run's step log
// (plan/measured_costs.hpp). A stage's share of a compute time is its units' share of the
// model's cost (models::gpt::unit_costs, or the parameters of a model without them), over
// its tensor-parallel degree.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "weft/core/error.hpp"
#include "weft/plan/flat_json.hpp"

namespace weft::plan {

struct cost_model {
    // The whole model (every unit, tp = 1) on one sample (a row: a sequence for GPT), one rank.
    // The defaults are the zero-bubble paper's unit costs: real plans read or derive them.
    double forward_ms_per_sample = 1;          // T_F
    double backward_input_ms_per_sample = 1;   // T_B (I)
    double backward_weight_ms_per_sample = 1;  // T_W (W)
    double optimizer_ns_per_element = 1;       // one optimizer step of one element a rank updates
    double p2p_latency_us = 20;                // a pipeline send until its receive completes
    double p2p_gbytes_per_s = 5;
    double allreduce_latency_us = 20;  // one data- or tensor-parallel collective
    double allreduce_gbytes_per_s = 5; // its bus bandwidth (a ring moves 2(n-1)/n of the bytes)
    // Cores the ranks share; 0: each rank has its own. With fewer cores than ranks a rank's
    // compute is slowed by ranks / cores (time-sliced), as threads on a small machine are.
    int cores = 0;

    // Throws weft::error naming the first field that cannot price a layout.
    void validate() const {
        const auto positive = [](std::string_view name, double v) {
            require(std::isfinite(v) && v > 0, name, v, "must be a finite number > 0");
        };
        const auto non_negative = [](std::string_view name, double v) {
            require(std::isfinite(v) && v >= 0, name, v, "must be a finite number >= 0");
        };
        positive("forward_ms_per_sample", forward_ms_per_sample);
        positive("backward_input_ms_per_sample", backward_input_ms_per_sample);
        positive("backward_weight_ms_per_sample", backward_weight_ms_per_sample);
        non_negative("optimizer_ns_per_element", optimizer_ns_per_element);
        non_negative("p2p_latency_us", p2p_latency_us);
        positive("p2p_gbytes_per_s", p2p_gbytes_per_s);
        non_negative("allreduce_latency_us", allreduce_latency_us);
        positive("allreduce_gbytes_per_s", allreduce_gbytes_per_s);
        require(cores >= 0, "cores", cores, "must be >= 0 (0: a core per rank)");
    }

    friend bool operator==(const cost_model&, const cost_model&) = default;
};

// The cost model of a JSON object (keys: the field names; others are an error, so that a
// misspelt key is not silently a default); `where` names the input in errors.
[[nodiscard]] inline cost_model cost_model_from_json(std::string_view text, std::string_view where = "costs") {
    cost_model c;
    const std::map<std::string, double*> fields{
        {"forward_ms_per_sample", &c.forward_ms_per_sample},
        {"backward_input_ms_per_sample", &c.backward_input_ms_per_sample},
        {"backward_weight_ms_per_sample", &c.backward_weight_ms_per_sample},
        {"optimizer_ns_per_element", &c.optimizer_ns_per_element},
        {"p2p_latency_us", &c.p2p_latency_us},
        {"p2p_gbytes_per_s", &c.p2p_gbytes_per_s},
        {"allreduce_latency_us", &c.allreduce_latency_us},
        {"allreduce_gbytes_per_s", &c.allreduce_gbytes_per_s}};
    for (const auto& [key, value] : read_flat_json(text, where)) {
        if (key == "cores") {
            require(value >= 0 && value <= (1 << 20) && value == std::floor(value), std::string(where) + ": cores",
                    value, "must be a whole number >= 0");
            c.cores = static_cast<int>(value);
        } else if (const auto field = fields.find(key); field != fields.end()) {
            *field->second = value;
        } else {
            std::string known = "cores";
            for (const auto& [name, ignored] : fields) known += ", " + name;
            throw invalid_argument(std::string(where) + ": key", key, "is not a cost model field; valid: " + known);
        }
    }
    try {
        c.validate();
    } catch (const error& e) {
        throw error(std::string(where) + ": " + std::string(e.what()).substr(6));  // without "weft: "
    }
    return c;
}

// A small text file (a cost model, a step log): at most 64 MiB; `flag` names it in errors.
[[nodiscard]] inline std::string read_text_file(const std::string& path, std::string_view flag) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw invalid_argument(flag, path, "must name a readable file");
    if (std::filesystem::file_size(path, ec) > (std::uintmax_t{64} << 20) || ec)
        throw invalid_argument(flag, path, "must be a file of at most 64 MiB");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw invalid_argument(flag, path, "cannot open the file for reading");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// The cost model in the JSON file `path`; `flag` names it in errors ("--costs").
[[nodiscard]] inline cost_model load_cost_model(const std::string& path, const std::string& flag = "costs file") {
    return cost_model_from_json(read_text_file(path, flag), flag + " " + path);
}

}  // namespace weft::plan
