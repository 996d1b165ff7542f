// examples/weft_schedule: generate (or read from PyTorch-style CSV) a pipeline schedule, then
// print it as an ASCII chart, CSV, JSON, an SVG picture or a Chrome/Perfetto trace, or print
// its simulated makespan, bubble rate and peak activations as one JSON object.
//
//   weft-schedule --schedule zbv --stages 4 --microbatches 8 --format svg > zbv.svg
//   weft-schedule --schedule 1f1b --stages 4 --microbatches 8 --simulate
//   weft-schedule --input schedule.csv --format trace > trace.json
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/run/options.hpp"
#include "weft/run/program_file.hpp"
#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/csv.hpp"
#include "weft/core/json_text.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/render_ascii.hpp"
#include "weft/sched/render_json.hpp"
#include "weft/sched/render_svg.hpp"
#include "weft/sched/render_trace.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/sched/validate.hpp"
#include "weft/sched/zb_auto.hpp"

namespace {

namespace ws = weft::sched;

struct cli_options {
    std::string schedule;
    int stages = 4;
    int microbatches = 8;
    int chunks = 0;  // 0: the schedule's own (schedule_kind::default_chunks)
    double tf = 1;
    double tb = 1;
    double tw = 1;
    double tcomm = 0;
    int mem_limit = 0;
    std::string format = "ascii";
    bool simulate = false;
    std::string input;
};

// The program to show, and the name it is shown under.
struct chosen_program {
    std::string name;
    ws::program program;
};

[[nodiscard]] chosen_program choose(const cli_options& o, const ws::cost_model& costs) {
    // PyTorch's stage-wide cells (REDUCE_GRAD, UNSHARD, RESHARD) are read, checked and kept:
    // the formats show them (csv, json) or draw the compute around them (ascii, svg, trace).
    if (!o.input.empty()) return {"csv", weft::run::read_program_file(o.input, "--input")};
    if (o.schedule.empty())
        throw weft::invalid_argument(
            "--schedule", "", "give a schedule (one of: " + ws::schedule_name_list() + ") or --input FILE.csv");
    weft::schedule_kind kind{};
    try {
        kind = ws::parse_schedule_kind(o.schedule);
    } catch (const weft::error&) {
        throw weft::invalid_argument("--schedule", o.schedule, "expected one of: " + ws::schedule_name_list());
    }
    const ws::schedule_params params{.ranks = o.stages,
                                     .microbatches = o.microbatches,
                                     .chunks = o.chunks == 0 ? kind.default_chunks() : o.chunks,
                                     .costs = costs,
                                     .memory_limit = o.mem_limit};
    if (o.mem_limit != 0 && kind != ws::zb_auto::kind)
        throw weft::invalid_argument("--mem-limit", o.mem_limit,
                                     "applies to zb-auto only; " + o.schedule + " has its own memory use");
    ws::program program = ws::generate(kind, params);
    if (kind == ws::zb_auto::kind && !ws::zb_auto::searches(params)) {
        // On stderr, so that the output on stdout stays what --format asked for.
        const std::string fallback(ws::zb_auto::fallback_name(params));
        std::fprintf(stderr,
                     "weft-schedule: zb-auto: %d ranks x %d micro-batches is beyond its search limit "
                     "(ranks^3 x micro-batches <= 2^24); using %s\n",
                     o.stages, o.microbatches, fallback.c_str());
    }
    return {o.schedule, std::move(program)};
}

[[nodiscard]] std::string simulation_json(const chosen_program& chosen, const ws::simulation& sim,
                                          const cli_options& o) {
    using weft::detail::json_string;
    using weft::detail::number_text;
    const ws::program& p = chosen.program;
    std::string out = "{\"schedule\":" + json_string(chosen.name);
    if (!o.input.empty()) out += ",\"input\":" + json_string(o.input);
    out += ",\"stages\":" + std::to_string(p.num_ranks) + ",\"microbatches\":" + std::to_string(p.num_microbatches) +
           ",\"chunks\":" + std::to_string(p.num_stages / p.num_ranks) + ",\"makespan\":" + number_text(sim.makespan) +
           ",\"bubble_rate\":" + number_text(sim.bubble_rate) + ",\"peak_activations\":[";
    for (std::size_t r = 0; r < sim.peak_activations.size(); ++r)
        out += (r == 0 ? "" : ",") + number_text(sim.peak_activations[r]);
    out += "]}\n";
    return out;
}

[[nodiscard]] std::string run(const cli_options& o) {
    ws::cost_model costs;
    costs.uniform = {.forward = o.tf, .backward_input = o.tb, .backward_weight = o.tw};
    costs.comm = o.tcomm;
    const chosen_program chosen = choose(o, costs);
    const ws::program& p = chosen.program;
    if (const ws::validation v = ws::check(p); !v.ok) throw weft::error("the program is invalid: " + v.message);
    if (p.num_stages % p.num_ranks != 0)
        throw weft::invalid_argument("num_stages", p.num_stages,
                                     "must be a multiple of the number of ranks (" + std::to_string(p.num_ranks) +
                                         ") so that every rank holds the same number of chunks");

    if (o.format == "csv" && !o.simulate) return ws::to_csv(p);
    if (o.format == "json" && !o.simulate) return ws::render_json(p);
    const ws::simulation sim = ws::simulate(p, costs);
    if (!std::isfinite(sim.makespan))
        throw weft::invalid_argument("--tf, --tb, --tw, --tcomm", "their sum over the program",
                                     "overflows: the costs must keep the makespan finite");
    if (o.simulate) return simulation_json(chosen, sim, o);
    if (o.format == "svg") {
        ws::svg_options svg;
        svg.title = chosen.name + ": " + std::to_string(p.num_ranks) + " ranks, " + std::to_string(p.num_microbatches) +
                    " micro-batches, " + std::to_string(p.num_stages / p.num_ranks) + " chunk(s) per rank";
        return ws::render_svg(p, sim, svg);
    }
    if (o.format == "trace") return ws::render_trace(p, sim);
    return ws::render_ascii(p, sim);
}

// "interleaved 2, looped-bfs 2, zbv 2, dualpipev 2, others 1", from the schedules' own defaults.
[[nodiscard]] std::string default_chunks_text() {
    std::string text;
    weft::for_each_type(ws::schedule_list{}, [&text]<class S>(std::type_identity<S>) {
        if (const int chunks = S::kind.default_chunks(); chunks != 1)
            text.append(S::name).append(" ").append(std::to_string(chunks)).append(", ");
    });
    return text + "others 1";
}

// --list: "<name> <default chunks>" per line, in the list's order (scripts read it).
[[nodiscard]] std::string schedule_table() {
    std::string text;
    weft::for_each_type(ws::schedule_list{}, [&text]<class S>(std::type_identity<S>) {
        text.append(S::name).append(" ").append(std::to_string(S::kind.default_chunks())).append("\n");
    });
    return text;
}


}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Generate a pipeline schedule (or read one from PyTorch-style CSV), then draw it or simulate it."};
    cli_options o;
    auto* schedule = app.add_option("--schedule", o.schedule, "schedule: " + ws::schedule_name_list());
    auto* stages =
        app.add_option("--stages", o.stages, "pipeline ranks p")->check(CLI::Range(1, 4096))->capture_default_str();
    auto* microbatches = app.add_option("--microbatches", o.microbatches, "micro-batches m")
                             ->check(CLI::Range(1, 1 << 20))
                             ->capture_default_str();
    auto* chunks =
        app.add_option("--chunks", o.chunks, "model chunks per rank v (default: " + default_chunks_text() + ")")
            ->check(CLI::Range(1, 64));
    app.add_option("--tf", o.tf, "forward cost T_F")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    app.add_option("--tb", o.tb, "backward-for-inputs cost T_B")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    app.add_option("--tw", o.tw, "backward-for-weights cost T_W")
        ->check(weft::run::finite_at_least(0, false))
        ->capture_default_str();
    app.add_option("--tcomm", o.tcomm, "latency of a send between ranks")
        ->check(weft::run::finite_at_least(0, true))
        ->capture_default_str();
    auto* mem_limit = app.add_option("--mem-limit", o.mem_limit,
                                     "zb-auto: most live activations per rank, in micro-batches (default p). "
                                     "zb-auto searches up to ranks^3 x micro-batches = 2^24, beyond which it "
                                     "uses zb-h2 (or zb-h1)")
                          ->check(CLI::Range(0, 1 << 20));
    auto* format = app.add_option("--format", o.format, "output: ascii, csv, json, svg or trace")
                       ->check(CLI::IsMember({"ascii", "csv", "json", "svg", "trace"}))
                       ->capture_default_str();
    app.add_flag("--simulate", o.simulate, "print makespan, bubble rate and peak activations as one JSON object")
        ->excludes(format);
    app.add_option("--input", o.input,
                   "read the program from a CSV file in PyTorch's form instead of generating it: compute cells, and "
                   "REDUCE_GRAD, UNSHARD and RESHARD cells, which are checked and kept")
        ->excludes(schedule)
        ->excludes(stages)
        ->excludes(microbatches)
        ->excludes(chunks)
        ->excludes(mem_limit);
    bool list = false;
    app.add_flag("--list", list, "print each schedule's name and default chunks per rank, one per line, and exit");
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;
    if (list) {
        const std::string table = schedule_table();
        std::fwrite(table.data(), 1, table.size(), stdout);
        return std::fflush(stdout) == 0 ? 0 : 1;
    }

    try {
        const std::string out = run(o);
        std::fwrite(out.data(), 1, out.size(), stdout);
        return std::fflush(stdout) == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "weft-schedule: %s\n", ws::detail::without_error_prefix(e.what()).c_str());
        return 1;
    }
}
