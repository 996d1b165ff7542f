// A cost model derived from a run's JSON step log (train_gpt --log-json: one object per
// step with "step", "ms" and "bubble", train::format_step_json) and the layout that run had.
//
// What it derives, and what it approximates: the median ms/step after the warm-up steps, and
// the median bubble (the ranks' mean idle fraction of the program), give the busy time of a
// rank, ms * (1 - bubble); the ranks of one replica share the model's compute for its
// batch / dp samples, each over tp, so the whole model costs ms * (1 - bubble) * pp * tp * dp /
// batch per sample, divided by the measured run's slow-down where its ranks shared fewer cores
// (cost_model::cores). That time is split 1 : 1 : 1 between forward, backward for inputs and
// backward for weights (a backward costs about twice a forward, its halves alike). The
// optimizer step and the data-parallel reduction of the measured run are counted in it (the
// log does not separate them); the links' latency and bandwidth, the optimizer's time per
// element and the cores are the base model's, as given.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/plan/cost_model.hpp"
#include "weft/plan/flat_json.hpp"

namespace weft::plan {

// The layout and batch of the run that wrote the log.
struct measured_run {
    int pp = 1;
    int dp = 1;
    int tp = 1;
    int batch_size = 1;
    int warmup_steps = 2;  // the first steps of the log, left out (allocation, first touches)
};

namespace detail {

[[nodiscard]] inline double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace detail

// The median ms/step and bubble of a step log's steps after `warmup_steps`.
struct step_log_summary {
    double ms = 0;
    double bubble = 0;
    int steps = 0;  // steps the medians are over
};

[[nodiscard]] inline step_log_summary summarize_step_log(std::string_view jsonl, int warmup_steps,
                                                         std::string_view where = "step log") {
    require(warmup_steps >= 0, "warmup_steps", warmup_steps, "must be >= 0");
    std::vector<double> ms, bubble;
    int line_number = 0;
    for (std::size_t at = 0; at < jsonl.size();) {
        const std::size_t end = std::min(jsonl.find('\n', at), jsonl.size());
        const std::string_view line = jsonl.substr(at, end - at);
        at = end + 1;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        const std::string here = std::string(where) + " line " + std::to_string(++line_number);
        const auto fields = read_flat_json(line, here);
        const auto found = fields.find("ms");
        if (found == fields.end() || !(found->second > 0))
            throw invalid_argument(here, std::string(line.substr(0, 80)),
                                   "must hold \"ms\" > 0 (a step of train_gpt --log-json)");
        if (line_number <= warmup_steps) continue;
        ms.push_back(found->second);
        const auto idle = fields.find("bubble");
        bubble.push_back(idle != fields.end() && idle->second >= 0 && idle->second < 1 ? idle->second : 0.0);
    }
    if (ms.empty())
        throw invalid_argument(std::string(where) + " steps", line_number,
                               "must be more than the " + std::to_string(warmup_steps) + " warm-up steps left out");
    return {detail::median(ms), detail::median(bubble), static_cast<int>(ms.size())};
}

// The cost model of the run that wrote `jsonl` with layout `run` (see above); `base` gives
// what a step log does not measure.
[[nodiscard]] inline cost_model costs_from_step_log(std::string_view jsonl, const measured_run& run,
                                                    const cost_model& base = {},
                                                    std::string_view where = "step log") {
    require(run.pp >= 1, "measured pp", run.pp, "must be >= 1");
    require(run.dp >= 1, "measured dp", run.dp, "must be >= 1");
    require(run.tp >= 1, "measured tp", run.tp, "must be >= 1");
    require(run.batch_size >= 1, "measured batch_size", run.batch_size, "must be >= 1");
    base.validate();
    const step_log_summary s = summarize_step_log(jsonl, run.warmup_steps, where);
    const int ranks = run.pp * run.dp * run.tp;
    const double slow = base.cores > 0 && ranks > base.cores ? static_cast<double>(ranks) / base.cores : 1.0;
    const double per_sample = s.ms * (1 - s.bubble) * run.pp * run.tp * run.dp / run.batch_size / slow;
    cost_model c = base;
    c.forward_ms_per_sample = per_sample / 3;
    c.backward_input_ms_per_sample = per_sample / 3;
    c.backward_weight_ms_per_sample = per_sample / 3;
    c.validate();
    return c;
}

// The same from the step log file `path`; `flag` names it in errors ("--step-log").
[[nodiscard]] inline cost_model load_step_log_costs(const std::string& path, const measured_run& run,
                                                    const cost_model& base = {},
                                                    const std::string& flag = "step log") {
    return costs_from_step_log(read_text_file(path, flag), run, base, flag + " " + path);
}

}  // namespace weft::plan
