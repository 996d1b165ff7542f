// A simulated program as a standalone SVG picture: one lane per rank, a colored box per
// compute action (F, B, I, W, overlapped F+B) at its simulated time, a time axis and a legend.
// Boxes carry class="action" and a <title> with the action's text, for tools and tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/json_text.hpp"
#include "weft/core/xml_text.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/simulate.hpp"

namespace weft::sched {

struct svg_options {
    double unit_width = 24;  // pixels per time unit of the cost model
    double lane_height = 26;
    std::string title;  // drawn above the lanes when not empty (escaped)
};

namespace detail {

[[nodiscard]] inline std::string_view svg_fill(action_kind kind) {
    switch (kind) {
        case action_kind::F:
            return "#4e79a7";
        case action_kind::B:
            return "#59a14f";
        case action_kind::I:
            return "#f28e2b";
        case action_kind::W:
            return "#9c755f";
        case action_kind::OVERLAP_F_B:
            return "#b07aa1";
        default:
            return "#bab0ac";
    }
}


// A tick every 1, 2, 5, 10, ... time units, whichever keeps the axis at about 20 ticks or fewer.
[[nodiscard]] inline double svg_tick_step(double makespan) {
    double step = 1;
    while (makespan / step > 20) {
        if (makespan / (step * 2) <= 20) return step * 2;
        if (makespan / (step * 5) <= 20) return step * 5;
        step *= 10;
    }
    return step;
}

// The width a line of text takes at `font_size` pixels, estimated wide (0.62 em a character,
// wider than most sans-serif glyphs on average) so that what is laid out by it fits.
[[nodiscard]] inline double svg_text_width(std::string_view text, double font_size) {
    return 0.62 * font_size * static_cast<double>(text.size());
}

}  // namespace detail

[[nodiscard]] inline std::string render_svg(const program& p, const simulation& sim, const svg_options& options = {}) {
    require(options.unit_width > 0 && std::isfinite(options.unit_width), "svg_options.unit_width", options.unit_width,
            "must be > 0");
    require(options.lane_height >= 8 && std::isfinite(options.lane_height), "svg_options.lane_height",
            options.lane_height, "must be >= 8");
    require(sim.timeline.size() == p.ranks.size(), "simulation.timeline.size()", sim.timeline.size(),
            "must equal the program's number of ranks (" + std::to_string(p.ranks.size()) +
                "); pass the simulation of this program");
    using weft::detail::fixed_text;
    const double left = 64;
    const double top = options.title.empty() ? 10 : 34;
    const double makespan = std::max(sim.makespan, 0.0);
    const double lanes_width = makespan * options.unit_width;
    const double lanes_height = options.lane_height * static_cast<double>(p.ranks.size());
    const double axis_y = top + lanes_height;
    const double legend_y = axis_y + 34;
    const double height = legend_y + 26;

    // The legend's entries, left to right, and the axis caption, right-aligned under the lanes'
    // end unless that would push it past the left margin: the picture is wide enough for them
    // and for the title, however narrow the lanes.
    struct entry {
        action_kind kind;
        std::string_view text;
    };
    constexpr entry legend[] = {{action_kind::F, "F forward"},
                                {action_kind::B, "B backward"},
                                {action_kind::I, "I backward (inputs)"},
                                {action_kind::W, "W backward (weights)"},
                                {action_kind::OVERLAP_F_B, "F+B overlapped"}};
    constexpr std::string_view chunk_note = "lighter: a rank's later chunk";
    constexpr double font = 10, title_font = 13;
    const std::string caption = "time (makespan " + weft::detail::number_text(makespan) + ", bubble rate " +
                                weft::detail::fixed_text(100 * sim.bubble_rate, 1) + "%)";
    const double caption_end = std::max(left + lanes_width, left + detail::svg_text_width(caption, font));

    // A rank's later chunks are drawn lighter, so the two passes of a V or loop tell apart.
    std::vector<int> chunk_of(p.stage_rank.size(), 0);
    std::vector<int> chunks_seen(p.ranks.size(), 0);
    bool several_chunks = false;
    for (std::size_t s = 0; s < p.stage_rank.size(); ++s) {
        const int r = p.stage_rank[s];
        if (r < 0 || static_cast<std::size_t>(r) >= chunks_seen.size()) continue;
        chunk_of[s] = chunks_seen[static_cast<std::size_t>(r)]++;
        several_chunks = several_chunks || chunk_of[s] > 0;
    }
    double legend_end = left;
    for (const entry& e : legend) legend_end += 16 + detail::svg_text_width(e.text, font) + 6;
    if (several_chunks) legend_end += detail::svg_text_width(chunk_note, font);
    const double width = std::max({left + lanes_width + 16, legend_end + 16, caption_end + 16,
                                   left + detail::svg_text_width(options.title, title_font) + 16, 720.0});
    const auto opacity = [&](int stage) -> std::string {
        if (stage < 0 || static_cast<std::size_t>(stage) >= chunk_of.size() ||
            chunk_of[static_cast<std::size_t>(stage)] == 0)
            return "";
        return " fill-opacity=\"" + fixed_text(std::max(0.35, 1.0 - 0.35 * chunk_of[static_cast<std::size_t>(stage)])) +
               "\"";
    };

    std::string out;
    out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed_text(width) + "\" height=\"" +
           fixed_text(height) + "\" viewBox=\"0 0 " + fixed_text(width) + " " + fixed_text(height) +
           "\" font-family=\"sans-serif\" font-size=\"10\">\n";
    out += "<rect x=\"0\" y=\"0\" width=\"" + fixed_text(width) + "\" height=\"" + fixed_text(height) +
           "\" fill=\"#ffffff\"/>\n";
    if (!options.title.empty())
        out += "<text x=\"" + fixed_text(left) + "\" y=\"20\" font-size=\"13\">" + weft::detail::xml_text(options.title) +
               "</text>\n";

    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        const double y = top + options.lane_height * static_cast<double>(r);
        out += "<rect x=\"" + fixed_text(left) + "\" y=\"" + fixed_text(y) + "\" width=\"" + fixed_text(lanes_width) +
               "\" height=\"" + fixed_text(options.lane_height) + "\" fill=\"" + (r % 2 == 0 ? "#f4f4f4" : "#ebebeb") +
               "\"/>\n";
        out += "<text x=\"6\" y=\"" + fixed_text(y + options.lane_height / 2 + 4) + "\">rank " + std::to_string(r) +
               "</text>\n";
        for (const timed_action& t : sim.timeline[r]) {
            if (!is_compute(t.what.kind)) continue;
            const double x = left + t.start * options.unit_width;
            const double w = (t.end - t.start) * options.unit_width;
            const std::string text = to_string(t.what);
            out += "<g><title>" + weft::detail::xml_text(text) + " [" + weft::detail::number_text(t.start) + ", " +
                   weft::detail::number_text(t.end) + ")</title><rect class=\"action\" x=\"" + fixed_text(x) + "\" y=\"" +
                   fixed_text(y + 2) + "\" width=\"" + fixed_text(w) + "\" height=\"" +
                   fixed_text(options.lane_height - 4) + "\" fill=\"" + std::string(detail::svg_fill(t.what.kind)) +
                   "\"" + opacity(t.what.stage) + " stroke=\"#ffffff\" stroke-width=\"1\"/>";
            // The micro-batch number (forward's/backward's for a pair) where the box has room for it.
            std::string label = std::to_string(t.what.microbatch);
            if (t.what.kind == action_kind::OVERLAP_F_B) label += "/" + std::to_string(t.what.overlap_microbatch);
            if (w >= 6.5 * static_cast<double>(label.size()) + 2)
                out += "<text x=\"" + fixed_text(x + w / 2) + "\" y=\"" + fixed_text(y + options.lane_height / 2 + 4) +
                       "\" text-anchor=\"middle\" fill=\"#ffffff\">" + label + "</text>";
            out += "</g>\n";
        }
    }

    // Time axis.
    out += "<line x1=\"" + fixed_text(left) + "\" y1=\"" + fixed_text(axis_y) + "\" x2=\"" +
           fixed_text(left + lanes_width) + "\" y2=\"" + fixed_text(axis_y) + "\" stroke=\"#333333\"/>\n";
    const double step = detail::svg_tick_step(makespan);
    for (long long k = 0; static_cast<double>(k) * step <= makespan + 1e-9; ++k) {
        const double t = static_cast<double>(k) * step;
        const double x = left + t * options.unit_width;
        out += "<line x1=\"" + fixed_text(x) + "\" y1=\"" + fixed_text(axis_y) + "\" x2=\"" + fixed_text(x) +
               "\" y2=\"" + fixed_text(axis_y + 4) + "\" stroke=\"#333333\"/><text x=\"" + fixed_text(x) + "\" y=\"" +
               fixed_text(axis_y + 15) + "\" text-anchor=\"middle\">" + weft::detail::number_text(t) + "</text>\n";
    }
    out += "<text x=\"" + fixed_text(caption_end) + "\" y=\"" + fixed_text(axis_y + 27) + "\" text-anchor=\"end\">" +
           caption + "</text>\n";

    // Legend.
    double x = left;
    for (const entry& e : legend) {
        out += "<rect x=\"" + fixed_text(x) + "\" y=\"" + fixed_text(legend_y) +
               "\" width=\"12\" height=\"12\" fill=\"" + std::string(detail::svg_fill(e.kind)) + "\"/><text x=\"" +
               fixed_text(x + 16) + "\" y=\"" + fixed_text(legend_y + 10) + "\">" + std::string(e.text) + "</text>\n";
        x += 16 + detail::svg_text_width(e.text, font) + 6;
    }
    if (several_chunks)
        out += "<text x=\"" + fixed_text(x) + "\" y=\"" + fixed_text(legend_y + 10) + "\">" + std::string(chunk_note) +
               "</text>\n";
    out += "</svg>\n";
    return out;
}

[[nodiscard]] inline std::string render_svg(const program& p, const cost_model& costs = {},
                                            const svg_options& options = {}) {
    return render_svg(p, simulate(p, costs), options);
}

}  // namespace weft::sched
