// Time spent per named operation over some steps, and its table: what
// weft/exec/cuda/operation_profile.hpp measures on the GPU and `train_gpt --kernel-profile`
// prints. Kept apart from CUDA so that the table is built and tested without a GPU.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"

namespace weft {

struct operation_time {
    std::string name;
    long long calls = 0;
    double milliseconds = 0;
};

// Adds `calls` calls of `milliseconds` in all to operation `name` of `totals`; a name new to
// `totals` goes at its end.
inline void add_operation_time(std::vector<operation_time>& totals, std::string_view name, long long calls,
                               double milliseconds) {
    const auto it = std::find_if(totals.begin(), totals.end(), [&](const auto& t) { return t.name == name; });
    if (it == totals.end()) {
        totals.push_back({std::string(name), calls, milliseconds});
    } else {
        it->calls += calls;
        it->milliseconds += milliseconds;
    }
}

// Adds `more` into `totals` by name, as add_operation_time does.
inline void accumulate_operation_times(std::vector<operation_time>& totals, const std::vector<operation_time>& more) {
    for (const operation_time& m : more) add_operation_time(totals, m.name, m.calls, m.milliseconds);
}

// Lines of a table, the longest total first: per step, each operation's calls, milliseconds
// and share of `step_milliseconds` (the mean step time over the same `steps`), then the sum
// of the operations and what the step spent outside them (on the GPU between operations, or
// in work the profile does not see: copies, communication, the host).
[[nodiscard]] inline std::vector<std::string> format_operation_times(std::vector<operation_time> totals,
                                                                     long long steps, double step_milliseconds) {
    require(steps > 0, "format_operation_times: steps", steps, "must be positive");
    require(step_milliseconds > 0, "format_operation_times: step_milliseconds", step_milliseconds, "must be positive");
    std::stable_sort(totals.begin(), totals.end(),
                     [](const auto& a, const auto& b) { return a.milliseconds > b.milliseconds; });
    const auto line = [&](const std::string& name, const std::string& calls, double ms) {
        char text[200];
        std::snprintf(text, sizeof text, "%-44s %8s %10.3f %6.1f%%", name.c_str(), calls.c_str(), ms,
                      100.0 * ms / step_milliseconds);
        return std::string(text);
    };
    char header[200];
    std::snprintf(header, sizeof header, "%-44s %8s %10s %7s", "operation (per step)", "calls", "ms", "step");
    std::vector<std::string> lines = {header};
    double sum = 0;
    for (const operation_time& t : totals) {
        const double ms = t.milliseconds / double(steps);
        sum += ms;
        char calls[32];
        std::snprintf(calls, sizeof calls, "%.1f", double(t.calls) / double(steps));
        lines.push_back(line(t.name, calls, ms));
    }
    lines.push_back(line("all of the above", "", sum));
    lines.push_back(line("the rest of the step", "", step_milliseconds - sum));
    return lines;
}

}  // namespace weft
