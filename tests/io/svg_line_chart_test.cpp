// The SVG line chart benchmarks draw for the docs: a standalone document, one line per series
// with its escaped label and every point in order, higher values drawn higher, nice axis ticks,
// no nan or inf for flat data, and bad input rejected with a message naming the field.
#include "weft/io/svg_line_chart.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

using weft::io::line_chart;
using weft::io::line_series;
using weft::io::render_line_chart;

namespace {

using point = std::pair<double, double>;

line_chart chart_of(std::vector<line_series> series) {
    line_chart chart;
    chart.title = "throughput";
    chart.x_label = "micro-batches";
    chart.y_label = "tokens / s";
    chart.series = std::move(series);
    return chart;
}

// Every `<tag .../>` or `<tag ...>` opening in the document, from its '<' to its '>'.
std::vector<std::string> elements(const std::string& svg, const std::string& tag) {
    std::vector<std::string> found;
    const std::string opening = "<" + tag + " ";
    for (std::size_t at = svg.find(opening); at != std::string::npos; at = svg.find(opening, at + 1))
        found.push_back(svg.substr(at, svg.find('>', at) - at + 1));
    return found;
}

std::string attribute(const std::string& element, const std::string& name) {
    const std::string key = " " + name + "=\"";
    const std::size_t start = element.find(key);
    REQUIRE(start != std::string::npos);
    const std::size_t value = start + key.size();
    return element.substr(value, element.find('"', value) - value);
}

// The (x, y) pairs of a polyline's points="x,y x,y ..." attribute.
std::vector<point> polyline_points(const std::string& polyline) {
    std::vector<point> points;
    std::istringstream in(attribute(polyline, "points"));
    point p;
    char comma = 0;
    while (in >> p.first >> comma >> p.second) {
        REQUIRE(comma == ',');
        points.push_back(p);
    }
    return points;
}

// The numbers written as tick labels of one axis ("x-tick" or "y-tick"), in document order.
std::vector<double> tick_values(const std::string& svg, const std::string& tick_class) {
    std::vector<double> values;
    for (const std::string& text : elements(svg, "text")) {
        if (text.find("class=\"" + tick_class + "\"") == std::string::npos) continue;
        const std::size_t start = svg.find(text) + text.size();
        values.push_back(std::stod(svg.substr(start, svg.find('<', start) - start)));
    }
    return values;
}

bool is_nice_step(double step) {
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
    for (const double nice : {1.0, 2.0, 5.0, 10.0})
        if (std::abs(mantissa - nice) < 1e-6) return true;
    return false;
}

}  // namespace

TEST_CASE("a line chart is a standalone SVG document") {
    const std::string svg = render_line_chart(chart_of({{"1F1B", {{1, 10}, {2, 20}}}}));
    const std::string head = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"";
    CHECK(svg.rfind(head, 0) == 0);
    REQUIRE(svg.size() > 7);
    CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
    CHECK(svg.find("throughput") != std::string::npos);
    CHECK(svg.find("micro-batches") != std::string::npos);
    CHECK(svg.find("tokens / s") != std::string::npos);
}

TEST_CASE("each series is one polyline with its escaped label, its every point and its own color") {
    const std::string odd_label = "a<b & \"c\"";
    const std::string svg = render_line_chart(
        chart_of({{"1F1B", {{1, 10}, {2, 20}, {4, 30}}}, {odd_label, {{1, 5}, {3, 15}, {4, 12}, {8, 40}}}}));
    const std::vector<std::string> polylines = elements(svg, "polyline");
    REQUIRE(polylines.size() == 2);
    CHECK(attribute(polylines[0], "class") == "series");
    CHECK(attribute(polylines[0], "data-label") == "1F1B");
    CHECK(attribute(polylines[1], "data-label") == "a&lt;b &amp; &quot;c&quot;");
    CHECK(svg.find(odd_label) == std::string::npos);  // never unescaped, in the legend or titles either
    CHECK(polyline_points(polylines[0]).size() == 3);
    CHECK(polyline_points(polylines[1]).size() == 4);
    CHECK(attribute(polylines[0], "stroke") != attribute(polylines[1], "stroke"));
    CHECK(elements(svg, "circle").size() >= 7);  // a marker per point (the legend adds its own)
    CHECK(svg.find("<title>a&lt;b &amp; &quot;c&quot;: 8, 40</title>") != std::string::npos);
}

TEST_CASE("points are drawn in the order given, higher y higher up and larger x further right") {
    line_chart chart = chart_of({{"loss", {{0, 1}, {1, 3}, {2, 2}, {3, -1}}}});
    for (const bool y_from_zero : {true, false}) {
        chart.y_from_zero = y_from_zero;
        const std::vector<std::string> polylines = elements(render_line_chart(chart), "polyline");
        REQUIRE(polylines.size() == 1);
        const std::vector<point> drawn = polyline_points(polylines[0]);
        REQUIRE(drawn.size() == 4);
        CHECK(drawn[0].first < drawn[1].first);
        CHECK(drawn[1].first < drawn[2].first);
        CHECK(drawn[2].first < drawn[3].first);
        // SVG's y grows downwards: y 3 > 2 > 1 > -1 means drawn y 1 < 2 < 0 < 3.
        CHECK(drawn[1].second < drawn[2].second);
        CHECK(drawn[2].second < drawn[0].second);
        CHECK(drawn[0].second < drawn[3].second);
    }
}

TEST_CASE("the axes get 1/2/5 x 10^k ticks that cover the data") {
    line_chart chart = chart_of({{"tokens", {{3, 0.013}, {47, 0.0871}}}});
    chart.y_from_zero = false;
    const std::string svg = render_line_chart(chart);
    struct axis_case {
        std::string tick_class;
        double data_min;
        double data_max;
    };
    for (const axis_case& axis : {axis_case{"x-tick", 3, 47}, axis_case{"y-tick", 0.013, 0.0871}}) {
        INFO(axis.tick_class);
        const std::vector<double> ticks = tick_values(svg, axis.tick_class);
        CHECK(ticks.size() >= 5);
        CHECK(ticks.size() <= 11);
        REQUIRE(ticks.size() >= 2);
        CHECK(ticks.front() <= axis.data_min);
        CHECK(ticks.back() >= axis.data_max);
        const double step = ticks[1] - ticks[0];
        CHECK(is_nice_step(step));
        for (std::size_t k = 1; k < ticks.size(); ++k) CHECK(ticks[k] - ticks[k - 1] == Approx(step));
    }
}

TEST_CASE("a constant series is drawn inside the frame without nan or inf") {
    for (const bool y_from_zero : {true, false}) {
        line_chart chart = chart_of({{"flat", {{2, 5}, {2, 5}, {2, 5}}}, {"zero", {{2, 0}}}});
        chart.y_from_zero = y_from_zero;
        const std::string svg = render_line_chart(chart);
        CHECK(svg.find("nan") == std::string::npos);
        CHECK(svg.find("inf") == std::string::npos);
        for (const std::string& polyline : elements(svg, "polyline"))
            for (const point& p : polyline_points(polyline)) {
                CHECK(p.first > 0);
                CHECK(p.first < chart.width);
                CHECK(p.second > 0);
                CHECK(p.second < chart.height);
            }
    }
}

TEST_CASE("bad charts are rejected with a message naming the field") {
    using Catch::Matchers::Contains;
    const line_chart good = chart_of({{"1F1B", {{1, 10}, {2, 20}}}, {"SWARM", {{0, 1}, {1, 2}, {2, 3}, {3, 4}}}});
    CHECK_NOTHROW(render_line_chart(good));

    CHECK_THROWS_WITH(render_line_chart(chart_of({})), Contains("line_chart.series.size() = 0"));

    line_chart unlabeled = good;
    unlabeled.series[1].label.clear();
    CHECK_THROWS_AS(render_line_chart(unlabeled), weft::error);
    CHECK_THROWS_WITH(render_line_chart(unlabeled), Contains("line_chart.series[1].label") && Contains("empty"));

    line_chart pointless = good;
    pointless.series[1].points.clear();
    CHECK_THROWS_WITH(render_line_chart(pointless), Contains("series \"SWARM\" points.size() = 0"));

    line_chart nan_y = good;
    nan_y.series[1].points[3].second = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(render_line_chart(nan_y), weft::error);
    CHECK_THROWS_WITH(render_line_chart(nan_y),
                      Contains("series \"SWARM\" point 3 y = ") && Contains("nan") && Contains("finite"));

    line_chart infinite_x = good;
    infinite_x.series[0].points[0].first = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH(render_line_chart(infinite_x), Contains("series \"1F1B\" point 0 x = inf"));

    line_chart narrow = good;
    narrow.width = 100;
    CHECK_THROWS_AS(render_line_chart(narrow), weft::error);
    CHECK_THROWS_WITH(render_line_chart(narrow), Contains("line_chart.width = 100") && Contains(">= 200"));

    line_chart short_chart = good;
    short_chart.height = 150;
    CHECK_THROWS_WITH(render_line_chart(short_chart), Contains("line_chart.height = 150"));
}
