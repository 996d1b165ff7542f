// The planner's layouts as the table weft-plan prints: place, layout (run::parse_layout's
// text and the micro-batches), ranks used, simulated ms/step, bubble, peak bytes per rank.
//
//   rank  layout                                            ranks   ms/step  bubble  peak bytes/rank
//      1  pp=1,dp=4,zero=1,schedule=gpipe,microbatches=1        4    10.214    0.0%  1795840 (1.7 MiB)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "weft/plan/planner.hpp"

namespace weft::plan {

[[nodiscard]] inline std::string format_plan_table(const std::vector<planned_layout>& layouts) {
    std::size_t width = 6;  // "layout"
    for (const planned_layout& p : layouts) width = std::max(width, p.layout.text().size());
    const int w = static_cast<int>(width);
    char line[512];
    std::snprintf(line, sizeof line, "%4s  %-*s  %5s  %8s  %6s  %s\n", "rank", w, "layout", "ranks", "ms/step",
                  "bubble", "peak bytes/rank");
    std::string out = line;
    for (std::size_t i = 0; i < layouts.size(); ++i) {
        const planned_layout& p = layouts[i];
        std::snprintf(line, sizeof line, "%4zu  %-*s  %5d  %8.3f  %5.1f%%  %zu (%s)\n", i + 1, w,
                      p.layout.text().c_str(), p.layout.world, p.estimate.step_ms, 100.0 * p.estimate.bubble,
                      p.estimate.peak_bytes, byte_text(static_cast<double>(p.estimate.peak_bytes)).c_str());
        out += line;
    }
    return out;
}

}  // namespace weft::plan
