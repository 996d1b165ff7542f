// A line chart as a standalone SVG picture: one line per series over axes with "nice"
// 1/2/5 x 10^k ticks, a marker per point, axis labels, a title and a legend. Benchmarks draw
// the plots in the docs with it, so the docs need no plotting tool (in the manner of
// sched/render_svg.hpp's schedule pictures). Lines carry class="series" and data-label, and
// each marker a <title> "label: x, y", for tools and tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/json_text.hpp"
#include "weft/core/xml_text.hpp"

namespace weft::io {

struct line_series {
    std::string label;                              // the legend's text; must not be empty
    std::vector<std::pair<double, double>> points;  // (x, y), all finite, joined in the order given
};

struct line_chart {
    std::string title;  // each text is drawn only when not empty
    std::string x_label;
    std::string y_label;
    std::vector<line_series> series;
    bool y_from_zero = true;  // the y axis reaches 0, so small differences do not look large
    double width = 640;       // of the whole picture, in pixels; at least 200
    double height = 400;
};

namespace detail {

// Tableau 10, as in sched's schedule pictures; an eleventh series reuses the first color.
inline constexpr std::string_view chart_palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                                     "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

// An axis from `lo` to `hi`, both whole multiples of `step`, with a tick at each multiple.
struct chart_axis {
    double lo = 0;
    double hi = 1;
    double step = 1;
    int tick_count = 2;
    int decimals = 0;  // digits after the point that the tick labels need

    [[nodiscard]] double tick(int index) const { return (std::round(lo / step) + index) * step; }
};

// The axis for data from `min` to `max`. The step is the smallest 1/2/5 x 10^k that cuts the
// span into at most 8 intervals; the next smaller step would cut more than 8 / 2.5, and widening
// to whole steps adds at most 2, so the axis gets 5 to 11 ticks.
[[nodiscard]] inline chart_axis nice_axis(double min, double max, std::string_view values_name) {
    // One value (or two too close to tell apart): pad around it, so it lands mid-axis instead of
    // the scale dividing by zero.
    if (max - min < 1e-290) {
        const double pad = std::abs(min) * 0.1 >= 1e-290 ? std::abs(min) * 0.1 : 1;
        min -= pad;
        max += pad;
    }
    const double span = max - min;
    require(std::isfinite(span), values_name,
            weft::detail::number_text(min) + " .. " + weft::detail::number_text(max),
            "must span less than the largest double, or the axis cannot be scaled");
    const double decade = std::pow(10.0, std::floor(std::log10(span / 8)));
    double step = decade * 10;
    for (const double multiple : {1.0, 2.0, 5.0}) {
        if (span / (decade * multiple) <= 8) {
            step = decade * multiple;
            break;
        }
    }
    chart_axis axis;
    axis.step = step;
    axis.lo = std::floor(min / step) * step;
    axis.hi = std::ceil(max / step) * step;
    axis.tick_count = static_cast<int>(std::round((axis.hi - axis.lo) / step)) + 1;
    axis.decimals = step >= 1 ? 0 : static_cast<int>(-std::floor(std::log10(step) + 1e-9));
    return axis;
}

// Fixed-point text for ordinary ticks; the shortest form where fixed point would need more
// digits than fixed_text's buffer holds (values past 1e15 or steps below 1e-12).
[[nodiscard]] inline std::string tick_text(double value, int decimals) {
    if (std::abs(value) >= 1e15 || decimals > 12) return weft::detail::number_text(value);
    return weft::detail::fixed_text(value, decimals);
}

}  // namespace detail

[[nodiscard]] inline std::string render_line_chart(const line_chart& chart) {
    using weft::detail::fixed_text;
    using weft::detail::number_text;
    require(std::isfinite(chart.width) && chart.width >= 200, "line_chart.width", chart.width,
            "must be a finite number of pixels >= 200");
    require(std::isfinite(chart.height) && chart.height >= 200, "line_chart.height", chart.height,
            "must be a finite number of pixels >= 200");
    require(!chart.series.empty(), "line_chart.series.size()", chart.series.size(),
            "must be >= 1: a chart needs a series to draw");

    constexpr double infinity = std::numeric_limits<double>::infinity();
    double x_min = infinity;
    double x_max = -infinity;
    double y_min = infinity;
    double y_max = -infinity;
    std::size_t longest_label = 0;
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
        const line_series& series = chart.series[s];
        require(!series.label.empty(), "line_chart.series[" + std::to_string(s) + "].label", series.label,
                "must not be empty: it names the series in the legend");
        const std::string name = "series \"" + series.label + "\"";
        require(!series.points.empty(), name + " points.size()", series.points.size(),
                "must be >= 1: a series needs a point to draw");
        for (std::size_t i = 0; i < series.points.size(); ++i) {
            const auto [x, y] = series.points[i];
            if (!std::isfinite(x))
                throw weft::invalid_argument(name + " point " + std::to_string(i) + " x", x,
                                             "must be finite (points count from 0)");
            if (!std::isfinite(y))
                throw weft::invalid_argument(name + " point " + std::to_string(i) + " y", y,
                                             "must be finite (points count from 0)");
            x_min = std::min(x_min, x);
            x_max = std::max(x_max, x);
            y_min = std::min(y_min, y);
            y_max = std::max(y_max, y);
        }
        longest_label = std::max(longest_label, series.label.size());
    }
    if (chart.y_from_zero) {
        y_min = std::min(y_min, 0.0);
        y_max = std::max(y_max, 0.0);
    }
    const detail::chart_axis x_axis = detail::nice_axis(x_min, x_max, "line_chart x values");
    const detail::chart_axis y_axis = detail::nice_axis(y_min, y_max, "line_chart y values");

    // Layout, with text widths estimated at 6.5 pixels a character of the 11-pixel font.
    const double char_width = 6.5;
    std::size_t longest_y_tick = 0;
    for (int k = 0; k < y_axis.tick_count; ++k)
        longest_y_tick = std::max(longest_y_tick, detail::tick_text(y_axis.tick(k), y_axis.decimals).size());
    const double plot_left =
        8 + (chart.y_label.empty() ? 0 : 20) + char_width * static_cast<double>(longest_y_tick) + 10;
    const double plot_top = chart.title.empty() ? 14 : 40;
    const double plot_bottom = chart.height - (chart.x_label.empty() ? 26 : 44);
    // The legend sits right of the plot; a very long label may run past the picture's edge
    // rather than squeeze the plot below 30% of the width.
    const double legend_width = std::min(26 + char_width * static_cast<double>(longest_label), chart.width * 0.3);
    const double plot_right = std::max(chart.width - 12 - legend_width - 16, plot_left + 40);
    const double plot_width = plot_right - plot_left;
    const double plot_height = plot_bottom - plot_top;
    const auto screen_x = [&](double x) { return plot_left + (x - x_axis.lo) / (x_axis.hi - x_axis.lo) * plot_width; };
    const auto screen_y = [&](double y) {
        return plot_bottom - (y - y_axis.lo) / (y_axis.hi - y_axis.lo) * plot_height;
    };

    std::string out;
    out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed_text(chart.width) + "\" height=\"" +
           fixed_text(chart.height) + "\" viewBox=\"0 0 " + fixed_text(chart.width) + " " + fixed_text(chart.height) +
           "\" font-family=\"sans-serif\" font-size=\"11\">\n";
    out += "<rect x=\"0\" y=\"0\" width=\"" + fixed_text(chart.width) + "\" height=\"" + fixed_text(chart.height) +
           "\" fill=\"#ffffff\"/>\n";
    if (!chart.title.empty())
        out += "<text class=\"title\" x=\"" + fixed_text(plot_left + plot_width / 2) +
               "\" y=\"24\" font-size=\"14\" text-anchor=\"middle\">" + weft::detail::xml_text(chart.title) + "</text>\n";

    // Grid lines first, so the frame, ticks and lines draw over them.
    for (int k = 0; k < x_axis.tick_count; ++k) {
        const std::string x = fixed_text(screen_x(x_axis.tick(k)));
        out += "<line x1=\"" + x + "\" y1=\"" + fixed_text(plot_top) + "\" x2=\"" + x + "\" y2=\"" +
               fixed_text(plot_bottom) + "\" stroke=\"#e6e6e6\"/>\n";
    }
    for (int k = 0; k < y_axis.tick_count; ++k) {
        const std::string y = fixed_text(screen_y(y_axis.tick(k)));
        out += "<line x1=\"" + fixed_text(plot_left) + "\" y1=\"" + y + "\" x2=\"" + fixed_text(plot_right) +
               "\" y2=\"" + y + "\" stroke=\"#e6e6e6\"/>\n";
    }
    out += "<rect class=\"frame\" x=\"" + fixed_text(plot_left) + "\" y=\"" + fixed_text(plot_top) + "\" width=\"" +
           fixed_text(plot_width) + "\" height=\"" + fixed_text(plot_height) +
           "\" fill=\"none\" stroke=\"#333333\"/>\n";

    // Axes: tick marks and labels along the frame's bottom and left edges.
    for (int k = 0; k < x_axis.tick_count; ++k) {
        const double value = x_axis.tick(k);
        const std::string x = fixed_text(screen_x(value));
        out += "<line x1=\"" + x + "\" y1=\"" + fixed_text(plot_bottom) + "\" x2=\"" + x + "\" y2=\"" +
               fixed_text(plot_bottom + 5) + "\" stroke=\"#333333\"/><text class=\"x-tick\" x=\"" + x + "\" y=\"" +
               fixed_text(plot_bottom + 17) + "\" text-anchor=\"middle\">" + detail::tick_text(value, x_axis.decimals) +
               "</text>\n";
    }
    for (int k = 0; k < y_axis.tick_count; ++k) {
        const double value = y_axis.tick(k);
        const std::string y = fixed_text(screen_y(value));
        out += "<line x1=\"" + fixed_text(plot_left - 5) + "\" y1=\"" + y + "\" x2=\"" + fixed_text(plot_left) +
               "\" y2=\"" + y + "\" stroke=\"#333333\"/><text class=\"y-tick\" x=\"" + fixed_text(plot_left - 8) +
               "\" y=\"" + fixed_text(screen_y(value) + 4) + "\" text-anchor=\"end\">" +
               detail::tick_text(value, y_axis.decimals) + "</text>\n";
    }
    if (!chart.x_label.empty())
        out += "<text class=\"x-label\" x=\"" + fixed_text(plot_left + plot_width / 2) + "\" y=\"" +
               fixed_text(plot_bottom + 35) + "\" text-anchor=\"middle\">" + weft::detail::xml_text(chart.x_label) +
               "</text>\n";
    if (!chart.y_label.empty())
        out += "<text class=\"y-label\" transform=\"translate(19 " + fixed_text(plot_top + plot_height / 2) +
               ") rotate(-90)\" text-anchor=\"middle\">" + weft::detail::xml_text(chart.y_label) + "</text>\n";

    // The series: a line through the points in their given order, then a marker on each point.
    constexpr std::size_t colors = std::size(detail::chart_palette);
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
        const line_series& series = chart.series[s];
        const std::string color(detail::chart_palette[s % colors]);
        const std::string label = weft::detail::xml_text(series.label);
        std::string points;
        for (const auto& [x, y] : series.points) {
            if (!points.empty()) points += ' ';
            points += fixed_text(screen_x(x)) + "," + fixed_text(screen_y(y));
        }
        out += "<polyline class=\"series\" data-label=\"" + label + "\" fill=\"none\" stroke=\"" + color +
               "\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"" + points + "\"/>\n";
        for (const auto& [x, y] : series.points)
            out += "<circle class=\"point\" cx=\"" + fixed_text(screen_x(x)) + "\" cy=\"" + fixed_text(screen_y(y)) +
                   "\" r=\"3\" fill=\"" + color + "\"><title>" + label + ": " + number_text(x) + ", " + number_text(y) +
                   "</title></circle>\n";
    }

    // Legend: a short stretch of each series' line and marker, then its label.
    const double legend_left = plot_right + 16;
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
        const std::string color(detail::chart_palette[s % colors]);
        const double y = plot_top + 8 + 18 * static_cast<double>(s);
        out += "<g class=\"legend\"><line x1=\"" + fixed_text(legend_left) + "\" y1=\"" + fixed_text(y) + "\" x2=\"" +
               fixed_text(legend_left + 20) + "\" y2=\"" + fixed_text(y) + "\" stroke=\"" + color +
               "\" stroke-width=\"2\"/><circle cx=\"" + fixed_text(legend_left + 10) + "\" cy=\"" + fixed_text(y) +
               "\" r=\"3\" fill=\"" + color + "\"/><text x=\"" + fixed_text(legend_left + 26) + "\" y=\"" +
               fixed_text(y + 4) + "\">" + weft::detail::xml_text(chart.series[s].label) + "</text></g>\n";
    }
    out += "</svg>\n";
    return out;
}

}  // namespace weft::io
