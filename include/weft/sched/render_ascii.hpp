// A simulated program as text: one row per rank, one column per time quantum, every compute
// action drawn where it runs and idle time as '.', so bubbles can be read off a terminal.
// Comm actions take no compute time and are not drawn.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/json_text.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/simulate.hpp"

namespace weft::sched {

struct ascii_options {
    // Wider charts are squeezed: one column then covers more time and shows only the
    // action's kind letter (O for an OVERLAP_F_B).
    int max_columns = 160;
};

namespace detail {

// The full label (`0F3`, `0F7+7B3` for an overlapped pair) or, in a squeezed chart, the kind letter.
[[nodiscard]] inline std::string ascii_label(const action& a, bool letters_only) {
    if (a.kind == action_kind::OVERLAP_F_B)
        return letters_only ? "O" : plain_action_text(forward_part(a)) + "+" + plain_action_text(backward_part(a));
    return letters_only ? std::string(to_string(a.kind)) : plain_action_text(a);
}

}  // namespace detail

[[nodiscard]] inline std::string render_ascii(const program& p, const simulation& sim,
                                              const ascii_options& options = {}) {
    require(options.max_columns >= 1, "ascii_options.max_columns", options.max_columns, "must be >= 1");
    require(sim.timeline.size() == p.ranks.size(), "simulation.timeline.size()", sim.timeline.size(),
            "must equal the program's number of ranks (" + std::to_string(p.ranks.size()) +
                "); pass the simulation of this program");

    // One column per shortest compute action: a time unit at unit costs, 1/v of one with v chunks.
    double quantum = 0;
    std::size_t label_width = 1;
    for (const auto& rank : sim.timeline)
        for (const timed_action& t : rank) {
            if (!is_compute(t.what.kind) || !(t.end > t.start)) continue;
            const double length = t.end - t.start;
            if (quantum == 0 || length < quantum) quantum = length;
            if (t.what.kind != action_kind::OVERLAP_F_B)
                label_width = std::max(label_width, detail::plain_action_text(t.what).size());
        }
    const double makespan = sim.makespan;
    std::string out;
    if (quantum == 0 || !(makespan > 0)) {
        for (std::size_t r = 0; r < p.ranks.size(); ++r) out += "rank " + std::to_string(r) + " |\n";
        out += "(no compute actions)\n";
        return out;
    }
    auto columns = static_cast<long long>(std::ceil(makespan / quantum - 1e-9));
    const bool squeezed = columns > options.max_columns;
    if (squeezed) {
        quantum = makespan / options.max_columns;
        columns = options.max_columns;
    }
    const std::size_t cell = squeezed ? 1 : label_width + 1;
    const auto column_of = [&](double t) {
        return std::clamp(static_cast<long long>(std::llround(t / quantum)), 0LL, columns);
    };

    const std::string prefix_pad(std::string("rank ").size() + std::to_string(p.ranks.size()).size(), ' ');
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        std::string row(static_cast<std::size_t>(columns) * cell, '.');
        for (const timed_action& t : sim.timeline[r]) {
            if (!is_compute(t.what.kind)) continue;
            const long long first = column_of(t.start);
            // An action shorter than a squeezed column still gets one, so none disappears.
            const long long last = std::max(first + 1, column_of(t.end));
            const std::size_t begin = static_cast<std::size_t>(first) * cell;
            const std::size_t end = std::min(row.size(), static_cast<std::size_t>(last) * cell);
            if (begin >= end) continue;
            std::string text = detail::ascii_label(t.what, squeezed);
            if (squeezed) {
                text = std::string(end - begin, text.front());
            } else {
                // Longer actions continue with '-'; a space closes each so neighbours stay apart.
                if (text.size() < end - begin) text.append(end - begin - text.size(), '-');
                text.resize(end - begin);
                text.back() = ' ';
            }
            row.replace(begin, end - begin, text);
        }
        std::string name = "rank " + std::to_string(r);
        name.resize(prefix_pad.size(), ' ');
        out += name + " |" + row + "|\n";
    }
    out += "one column = " + weft::detail::fixed_text(quantum, 3) + (quantum == 1 ? " time unit" : " time units") +
           "; makespan " + weft::detail::number_text(makespan) + ", bubble rate " +
           weft::detail::fixed_text(100 * sim.bubble_rate, 1) + "%\n";
    out += squeezed ? "F forward, B backward, I backward for inputs, W backward for weights, "
                      "O overlapped forward+backward, . idle\n"
                    : "<stage>F<mb> forward, B backward, I backward for inputs, W backward for weights, "
                      "<F>+<B> overlapped forward+backward, . idle\n";
    return out;
}

[[nodiscard]] inline std::string render_ascii(const program& p, const cost_model& costs = {},
                                              const ascii_options& options = {}) {
    return render_ascii(p, simulate(p, costs), options);
}

}  // namespace weft::sched
