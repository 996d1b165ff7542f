// The renderers: ASCII chart, SVG picture, Chrome/Perfetto trace and program JSON.
#include <catch2/catch.hpp>

#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "test_programs.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/csv.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/render_ascii.hpp"
#include "weft/sched/render_json.hpp"
#include "weft/sched/render_svg.hpp"
#include "weft/sched/render_trace.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/sched/simulate.hpp"

namespace ws = weft::sched;
using ws::action_kind;

namespace {

// A strict JSON reader that only answers "is this one well-formed JSON value?".
class json_checker {
public:
    explicit json_checker(std::string_view text) : text_(text) {}

    bool valid() {
        space();
        if (!value()) return false;
        space();
        return at_ == text_.size();
    }

private:
    bool value() {
        if (at_ >= text_.size()) return false;
        const char c = text_[at_];
        if (c == '{') return object();
        if (c == '[') return array();
        if (c == '"') return string();
        if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
        return word("true") || word("false") || word("null");
    }
    bool object() {
        ++at_;
        space();
        if (eat('}')) return true;
        do {
            space();
            if (!string()) return false;
            space();
            if (!eat(':')) return false;
            space();
            if (!value()) return false;
            space();
        } while (eat(','));
        return eat('}');
    }
    bool array() {
        ++at_;
        space();
        if (eat(']')) return true;
        do {
            space();
            if (!value()) return false;
            space();
        } while (eat(','));
        return eat(']');
    }
    bool string() {
        if (!eat('"')) return false;
        while (at_ < text_.size() && text_[at_] != '"') {
            if (static_cast<unsigned char>(text_[at_]) < 0x20) return false;
            if (text_[at_] == '\\') ++at_;
            ++at_;
        }
        return eat('"');
    }
    bool number() {
        const std::size_t begin = at_;
        eat('-');
        if (!digits()) return false;
        if (eat('.') && !digits()) return false;
        if (eat('e') || eat('E')) {
            if (!eat('+')) eat('-');
            if (!digits()) return false;
        }
        return at_ > begin;
    }
    bool digits() {
        const std::size_t begin = at_;
        while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) ++at_;
        return at_ > begin;
    }
    bool word(std::string_view w) {
        if (text_.substr(at_, w.size()) != w) return false;
        at_ += w.size();
        return true;
    }
    bool eat(char c) {
        if (at_ < text_.size() && text_[at_] == c) {
            ++at_;
            return true;
        }
        return false;
    }
    void space() {
        while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
    }

    std::string_view text_;
    std::size_t at_ = 0;
};

bool is_json(std::string_view text) {
    return json_checker(text).valid();
}

// Checks that every element is closed in order and that the root is <svg>; returns the problem or "".
std::string xml_problem(std::string_view text) {
    std::vector<std::string> open;
    std::size_t at = 0;
    bool root_seen = false;
    while ((at = text.find('<', at)) != std::string_view::npos) {
        const std::size_t close = text.find('>', at);
        if (close == std::string_view::npos) return "unterminated tag at " + std::to_string(at);
        const std::string_view tag = text.substr(at + 1, close - at - 1);
        at = close + 1;
        if (tag.front() == '?' || tag.front() == '!') continue;
        if (tag.front() == '/') {
            if (open.empty() || open.back() != tag.substr(1)) return "unexpected </" + std::string(tag.substr(1)) + ">";
            open.pop_back();
            continue;
        }
        const std::string name(tag.substr(0, tag.find_first_of(" \n/")));
        if (open.empty()) {
            if (root_seen || name != "svg") return "second root or non-svg root <" + name + ">";
            root_seen = true;
        }
        if (tag.back() != '/') open.push_back(name);
    }
    if (!open.empty()) return "<" + open.back() + "> not closed";
    return root_seen ? "" : "no <svg> root";
}

std::size_t count(std::string_view text, std::string_view what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + what.size())) ++n;
    return n;
}

std::size_t compute_actions(const ws::program& p) {
    std::size_t n = 0;
    for (const auto& rank : p.ranks)
        for (const ws::action& a : rank) n += ws::is_compute(a.kind) ? 1 : 0;
    return n;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::size_t begin = 0;
    for (std::size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1)
        out.push_back(text.substr(begin, end - begin));
    return out;
}

using weft_test::every_schedule;

// Two ranks, one DualPipe-style overlapped pair, split backward elsewhere.
const ws::program overlapped = ws::from_csv(
    "0F0,0F1,0I0,(0F2;0I1)OVERLAP_F_B,0W0,0I2,0W1,0W2\n"
    "1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1W2\n");

}  // namespace

TEST_CASE("the JSON checker used below tells JSON from non-JSON") {
    CHECK(is_json(R"({"a":[1,2.5,-3e2,"x\"y",true,null],"b":{}})"));
    CHECK_FALSE(is_json(R"({"a":[1,2,]})"));
    CHECK_FALSE(is_json(R"({"a":1}})"));
    CHECK_FALSE(is_json(R"({"a":.5})"));
    CHECK(xml_problem("<svg><g><rect/></g></svg>").empty());
    CHECK_FALSE(xml_problem("<svg><g><rect></g></svg>").empty());
}

TEST_CASE("ASCII: one row per rank, one column per time unit at unit costs") {
    const ws::program p = ws::one_f_one_b::generate(2, 2);
    const std::string chart = ws::render_ascii(p);
    const auto lines = lines_of(chart);
    REQUIRE(lines.size() >= 4);
    // Makespan 9 at unit costs (F = 1, B = 2): 9 cells of 4 characters, B spanning two.
    CHECK(lines[0] == "rank 0 |0F0 0F1 ........0B0---- ....0B1---- |");
    CHECK(lines[1] == "rank 1 |....1F0 1B0---- 1F1 1B1---- ........|");
    CHECK_THAT(chart, Catch::Contains("one column = 1 time unit; makespan 9, bubble rate 33.3%"));
    CHECK_THAT(chart, Catch::Contains(". idle"));
}

TEST_CASE("ASCII: wide charts are squeezed to the column limit and keep every action") {
    const ws::program p = ws::gpipe::generate(2, 40);
    const std::string chart = ws::render_ascii(p, ws::cost_model{}, ws::ascii_options{.max_columns = 50});
    const auto lines = lines_of(chart);
    REQUIRE(lines.size() >= 2);
    CHECK(lines[0].size() == std::string("rank 0 |").size() + 50 + 1);
    CHECK(count(lines[0], "F") > 0);
    CHECK(count(lines[0], "B") > 0);
    CHECK_THROWS_WITH(ws::render_ascii(p, ws::cost_model{}, ws::ascii_options{.max_columns = 0}),
                      Catch::Contains("max_columns"));
}

TEST_CASE("ASCII draws an overlapped pair with both parts") {
    const std::string chart = ws::render_ascii(overlapped);
    CHECK_THAT(chart, Catch::Contains("0F2+0I1"));
}

TEST_CASE("SVG: a standalone picture with one box per compute action") {
    for (const auto& g : every_schedule()) {
        INFO(g.name);
        const ws::simulation sim = ws::simulate(g.program);
        const std::string svg = ws::render_svg(g.program, sim, {.title = g.name + " <p=4>"});
        CHECK(svg.rfind("<?xml", 0) == 0);
        CHECK_THAT(svg, Catch::Contains("xmlns=\"http://www.w3.org/2000/svg\""));
        CHECK(xml_problem(svg).empty());
        CHECK(count(svg, "class=\"action\"") == compute_actions(g.program));
        CHECK(count(svg, ">rank ") == static_cast<std::size_t>(g.program.num_ranks));
        CHECK_THAT(svg, Catch::Contains("&lt;p=4&gt;"));
    }
    const std::string svg = ws::render_svg(overlapped);
    CHECK(xml_problem(svg).empty());
    CHECK(count(svg, "fill=\"#b07aa1\"") == 2);  // the pair's box and its legend swatch
}

// Where a picture's texts end, estimated as a browser lays them out at most (0.62 em a
// character, as the renderer plans for): each <text>'s [first, last) pixel, against the picture's
// width. Entities count as one character.
namespace {
struct svg_text_extent {
    std::string text;
    double first = 0;
    double last = 0;
};
double svg_attribute(std::string_view element, std::string_view name, double fallback) {
    const std::string key = " " + std::string(name) + "=\"";
    const auto at = element.find(key);
    if (at == std::string_view::npos) return fallback;
    return std::stod(std::string(element.substr(at + key.size())));
}
std::vector<svg_text_extent> svg_text_extents(const std::string& svg) {
    std::vector<svg_text_extent> out;
    for (std::size_t at = svg.find("<text "); at != std::string::npos; at = svg.find("<text ", at + 1)) {
        const std::size_t open_end = svg.find('>', at);
        const std::size_t close = svg.find("</text>", open_end);
        const std::string_view element(svg.data() + at, open_end - at);
        std::string text = svg.substr(open_end + 1, close - open_end - 1);
        std::size_t characters = 0;
        for (std::size_t i = 0; i < text.size(); ++i, ++characters)
            if (text[i] == '&') i = text.find(';', i);
        const double width = 0.62 * svg_attribute(element, "font-size", 10) * static_cast<double>(characters);
        const double x = svg_attribute(element, "x", 0);
        const bool ends = element.find("text-anchor=\"end\"") != std::string_view::npos;
        const bool middle = element.find("text-anchor=\"middle\"") != std::string_view::npos;
        const double first = ends ? x - width : middle ? x - width / 2 : x;
        out.push_back({std::move(text), first, first + width});
    }
    return out;
}
}  // namespace

// The legend and the axis caption were once laid out past the picture's right edge (the
// legend of a schedule with chunks, "lighter: ...", was cut off), and a narrow program's caption
// past its left edge.
TEST_CASE("SVG: every text lies inside the picture, the legend and the axis caption included") {
    std::vector<std::pair<std::string, ws::program>> programs;
    for (const auto& g : every_schedule()) programs.emplace_back(g.name, g.program);
    programs.emplace_back("1f1b on 1 rank, 1 micro-batch", ws::one_f_one_b::generate(1, 1));
    programs.emplace_back("overlapped pair", overlapped);
    bool saw_chunk_note = false;
    for (const auto& [name, program] : programs) {
        for (const std::string& title : {std::string(), name + " with a title long enough to reach past 720 pixels "
                                                             "at thirteen pixels a character, as a user may write"}) {
            INFO(name << (title.empty() ? "" : ", with a long title"));
            const std::string svg = ws::render_svg(program, ws::simulate(program), {.title = title});
            const double width = svg_attribute(svg, "width", 0);
            REQUIRE(width >= 720);
            for (const auto& t : svg_text_extents(svg)) {
                INFO("\"" << t.text << "\" spans [" << t.first << ", " << t.last << ") of " << width);
                CHECK(t.first >= 0);
                CHECK(t.last <= width);
                saw_chunk_note = saw_chunk_note || t.text.find("later chunk") != std::string::npos;
            }
        }
    }
    CHECK(saw_chunk_note);  // a schedule with chunks was among them
}

// Every element of the legend (its swatches and their texts), the chunk note included, ends
// at or before the picture's width attribute, whatever the pipeline: one rank or many, one
// micro-batch or many, many chunks, narrow or wide time units, a long title.
TEST_CASE("SVG: the legend ends inside the picture for every size of schedule") {
    std::vector<std::pair<std::string, ws::program>> programs;
    for (const char* name : {"gpipe", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zbv", "dualpipev"})
        for (const int ranks : {1, 2, 8})
            for (const int microbatches : {1, 2, 16})
                for (const int chunks : {0, 4, 8}) {
                    const weft::schedule_kind kind = ws::parse_schedule_kind(name);
                    const ws::schedule_params params{.ranks = ranks, .microbatches = microbatches,
                                                     .chunks = chunks == 0 ? kind.default_chunks() : chunks};
                    try {
                        programs.emplace_back(std::string(name) + " p=" + std::to_string(ranks) + " m=" +
                                                  std::to_string(microbatches) + " v=" + std::to_string(params.chunks),
                                              ws::generate(kind, params));
                    } catch (const weft::error&) {
                        // A layout this schedule does not run (e.g. zbv with 4 chunks): nothing to draw.
                    }
                }
    REQUIRE(programs.size() >= 60);
    programs.emplace_back("stage-wide cells", ws::from_csv("0UNSHARD,0F0,0F1,0B0,0B1,0REDUCE_GRAD,0RESHARD\n"
                                                           "1UNSHARD,1F0,1B0,1F1,1B1,1REDUCE_GRAD,1RESHARD\n",
                                                           {.stage_wide = true}));
    bool saw_many_chunks = false;
    for (const auto& [name, program] : programs) {
        saw_many_chunks = saw_many_chunks || program.num_stages / program.num_ranks == 8;
        for (const double unit_width : {0.5, 24.0})
            for (const std::string& title : {std::string(), name + ": " + std::string(200, 'x')}) {
                INFO(name << ", unit width " << unit_width << (title.empty() ? "" : ", long title"));
                const std::string svg =
                    ws::render_svg(program, ws::simulate(program), {.unit_width = unit_width, .title = title});
                REQUIRE(xml_problem(svg).empty());
                const double width = svg_attribute(svg, "width", 0);
                // The legend is the last row: its swatches are the 12-pixel squares.
                std::size_t swatches = 0;
                for (std::size_t at = svg.find("<rect "); at != std::string::npos; at = svg.find("<rect ", at + 1)) {
                    const std::string_view element(svg.data() + at, svg.find('>', at) - at);
                    if (element.find("width=\"12\" height=\"12\"") == std::string_view::npos) continue;
                    ++swatches;
                    CHECK(svg_attribute(element, "x", 0) + 12 <= width);
                }
                CHECK(swatches == 5);
                std::size_t legend_texts = 0;
                for (const auto& t : svg_text_extents(svg)) {
                    INFO("\"" << t.text << "\" spans [" << t.first << ", " << t.last << ") of " << width);
                    const bool in_legend = t.text.find("backward") != std::string::npos ||
                                           t.text.find("forward") != std::string::npos ||
                                           t.text.find("overlapped") != std::string::npos ||
                                           t.text.find("later chunk") != std::string::npos;
                    legend_texts += in_legend ? 1 : 0;
                    CHECK(t.first >= 0);
                    CHECK(t.last <= width);
                }
                CHECK(legend_texts >= 5);
            }
    }
    CHECK(saw_many_chunks);
}

TEST_CASE("renderers tolerate a program with stage-wide cells and draw its compute actions") {
    const ws::program p = ws::from_csv("0UNSHARD,0F0,0F1,0I0,0I1,0W0,0W1,0REDUCE_GRAD,0RESHARD\n"
                                       "1UNSHARD,1F0,1I0,1F1,1I1,1W0,1W1,1REDUCE_GRAD,1RESHARD\n",
                                       {.stage_wide = true});
    const ws::program compute = ws::compute_part(p);
    const ws::simulation sim = ws::simulate(p);
    CHECK(sim.makespan == ws::simulate(compute).makespan);
    const std::string svg = ws::render_svg(p, sim);
    CHECK(xml_problem(svg).empty());
    CHECK(count(svg, "class=\"action\"") == compute_actions(p));
    CHECK(ws::render_ascii(p, sim) == ws::render_ascii(compute, ws::simulate(compute)));
    const std::string trace = ws::render_trace(p, sim);
    CHECK(is_json(trace));
    CHECK(count(trace, "\"ph\":\"X\"") == compute_actions(p));
    const std::string json = ws::render_json(p);
    CHECK(is_json(json));
    CHECK_THAT(json, Catch::Contains("\"0UNSHARD\",\"0F0\"") && Catch::Contains("\"1REDUCE_GRAD\",\"1RESHARD\"]"));
}

TEST_CASE("SVG boxes sit at their simulated times") {
    const ws::program p = ws::one_f_one_b::generate(2, 2);
    ws::svg_options options;
    options.unit_width = 10;
    const std::string svg = ws::render_svg(p, ws::simulate(p), options);
    // Rank 1's first forward starts at t = 1: x = 64 (margin) + 10, width 10.
    CHECK_THAT(svg, Catch::Contains("<title>1F0 [1, 2)</title><rect class=\"action\" x=\"74\""));
    CHECK_THAT(svg, Catch::Contains("<title>0B0 [4, 6)</title><rect class=\"action\" x=\"104\" y=\"12\" width=\"20\""));
}

TEST_CASE("trace: valid JSON with one X event per compute action and a name per rank") {
    for (const auto& g : every_schedule()) {
        INFO(g.name);
        const std::string trace = ws::render_trace(g.program);
        CHECK(is_json(trace));
        CHECK(trace.rfind("{\"traceEvents\":[", 0) == 0);
        CHECK(count(trace, "\"ph\":\"X\"") == compute_actions(g.program));
        CHECK(count(trace, "\"thread_name\"") == static_cast<std::size_t>(g.program.num_ranks));
    }
    const ws::program p = ws::one_f_one_b::generate(2, 2);
    const std::string trace = ws::render_trace(p);
    CHECK_THAT(trace, Catch::Contains(R"({"name":"B mb0","cat":"B","ph":"X","ts":4000,"dur":2000,"pid":0,"tid":0,)"
                                      R"("args":{"action":"0B0","stage":0,"microbatch":0}})"));
    CHECK_THAT(trace, Catch::Contains(R"({"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"rank 1"}})"));
    const std::string pair = ws::render_trace(overlapped);
    CHECK(is_json(pair));
    CHECK_THAT(pair, Catch::Contains(R"("name":"F mb2 + I mb1","cat":"OVERLAP_F_B")"));
    CHECK_THAT(pair, Catch::Contains(R"("backward":"0I1")"));
}

TEST_CASE("program JSON lists sizes, placement and actions") {
    const ws::program p = ws::one_f_one_b::generate(2, 2);
    const std::string json = ws::render_json(p);
    CHECK(is_json(json));
    CHECK(json ==
          "{\"num_ranks\":2,\"num_stages\":2,\"num_microbatches\":2,\"lowered\":false,\"stage_rank\":[0,1],"
          "\"ranks\":[\n[\"0F0\",\"0F1\",\"0B0\",\"0B1\"],\n[\"1F0\",\"1B0\",\"1F1\",\"1B1\"]\n]}\n");
    CHECK(is_json(ws::render_json(overlapped)));
    for (const auto& g : every_schedule()) {
        INFO(g.name);
        const std::string all = ws::render_json(g.program);
        CHECK(is_json(all));
        CHECK(count(all, "\",\"") + static_cast<std::size_t>(g.program.num_ranks) == compute_actions(g.program));
    }
}

TEST_CASE("renderers refuse a simulation of another program") {
    const ws::program two = ws::one_f_one_b::generate(2, 2);
    const ws::simulation three = ws::simulate(ws::one_f_one_b::generate(3, 3));
    CHECK_THROWS_WITH(ws::render_ascii(two, three), Catch::Contains("simulation.timeline.size()"));
    CHECK_THROWS_WITH(ws::render_svg(two, three), Catch::Contains("simulation.timeline.size()"));
    CHECK_THROWS_WITH(ws::render_trace(two, three), Catch::Contains("simulation.timeline.size()"));
}
