// examples/weft-plan: the layout planner on a command line. Prints the fastest layouts of a GPT
// on at most --world ranks within --memory-budget bytes per rank (docs/planner.md):
//
//   weft-plan --world 4 --memory-budget 2GiB --layers 4 --d-model 128 --heads 4 --vocab 256
//             --seq-len 64 --batch 8 --top 5 [--costs FILE.json | --step-log FILE.jsonl --measured pp=2]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/gpt.hpp"
#include "weft/plan/byte_size.hpp"
#include "weft/plan/measured_costs.hpp"
#include "weft/plan/report.hpp"
#include "weft/run/exit_codes.hpp"
#include "weft/run/layout.hpp"
#include "weft/run/options.hpp"
#include "weft/sched/csv.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/engine.hpp"

using engine = weft::engine<weft::sched::all_schedules, weft::shard::any_zero, weft::comm::local, weft::exec::cpu,
                            weft::models::gpt>;

int main(int argc, char** argv) {
    CLI::App app{"Choose a parallel layout: the fastest simulated layouts within a memory budget per rank."};
    weft::run::settings settings;
    weft::run::gpt_sizes g;
    weft::run::add_options(app, settings, 0, g);
    int world = 1, batch = 8, cores = 0;
    std::string budget_text, costs_file, step_log, measured = "pp=1";
    weft::plan::search_space space;
    space.top = 5;
    app.add_option("--world", world, "ranks available (layouts may use fewer)")->check(weft::run::int_in(1, 4096));
    app.add_option("--memory-budget", budget_text, "bytes per rank, e.g. 2GiB, 512MiB")->required();
    app.add_option("--batch", batch, "global batch (sequences per step)")->check(weft::run::int_in(1, 1 << 24));
    app.add_option("--top", space.top, "layouts to print")->check(weft::run::int_in(1, 1 << 16));
    app.add_option("--microbatches", space.microbatches, "micro-batch counts to try (default 1,2,4,8,16)")
        ->delimiter(',');
    app.add_option("--chunks", space.chunks, "chunks per rank to try (default 1,2)")->delimiter(',');
    app.add_option("--schedules", space.schedules, "schedules to try (default all)")->delimiter(',');
    auto* costs_opt = app.add_option("--costs", costs_file, "cost model JSON file (plan::cost_model's fields)");
    auto* log_opt = app.add_option("--step-log", step_log, "derive the costs from train_gpt --log-json's file")
                        ->excludes(costs_opt);
    app.add_option("--measured", measured, "the --step-log run's layout (pp=,dp=,tp=), with this --batch")
        ->needs(log_opt);
    app.add_option("--cores", cores, "cores the ranks share (0: one per rank)")->check(weft::run::int_in(0, 1 << 20));
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;
    try {
        const long long budget = weft::plan::parse_byte_size(budget_text, "--memory-budget");
        const weft::nn::gpt_config model{.num_layers = g.layers, .d_model = g.d_model, .num_heads = g.heads,
                                         .vocab_size = g.vocab, .seq_len = g.seq_len};
        weft::plan::cost_model costs;
        if (!costs_file.empty()) costs = weft::plan::load_cost_model(costs_file, "--costs");
        if (cores != 0) costs.cores = cores;
        if (const auto m = weft::run::parse_layout(measured, "--measured"); !step_log.empty())
            costs = weft::plan::load_step_log_costs(step_log, {.pp = m.pp, .dp = m.dp, .tp = m.tp, .batch_size = batch},
                                                    costs, "--step-log");
        const weft::train::engine_options options{.batch_size = batch};
        std::vector<weft::plan::planned_layout> layouts;
        try {
            layouts = weft::plan::plan_layouts<engine>(world, budget, model, options, costs, space);
        } catch (const weft::error& e) {  // the planner names its parameters; the user gave flags
            const std::string what = weft::sched::detail::without_error_prefix(e.what());
            throw weft::error(what.starts_with("memory_budget") ? "--memory-budget " + budget_text + ": " + what : what);
        }
        std::printf("weft-plan: %d ranks, %s per rank, costs %s\n%s", world,
                    weft::plan::byte_text(static_cast<double>(budget)).c_str(),
                    !step_log.empty() ? step_log.c_str() : !costs_file.empty() ? costs_file.c_str() : "(unit)",
                    weft::plan::format_plan_table(layouts).c_str());
        return std::fflush(stdout) == 0 ? weft::run::exit_code::done : weft::run::exit_code::failed;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "weft-plan: %s\n", weft::sched::detail::without_error_prefix(e.what()).c_str());
        return weft::run::exit_code::failed;
    }
}
