// SWARM on a virtual clock (swarm/sim/), with the router and rebalancer of the real trainer:
//  1. throughput against the failure rate, SWARM next to a static 1F1B pipeline that restarts
//     from its last checkpoint;
//  2. percent of the optimum on a trace of preemptible workers, rebalancing never, every
//     300 s and every 60 s (Ryabinin et al. 2023 report 95.8 % at 300 s, 82.7 % without),
//     and the ceilings that whole workers and exact steps put on it;
//  3. interleaved weighted round-robin against uniform round-robin over workers of mixed
//     speeds.
// Markdown tables on stdout (docs/swarm.md shows them), and with --svg FILE the plot of (1).
// Usage: bench_swarm [--quick] [--svg FILE]
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/io/svg_line_chart.hpp"
#include "weft/swarm/sim/checkpoint_restart.hpp"
#include "weft/swarm/sim/placement_ceiling.hpp"
#include "weft/swarm/sim/virtual_swarm.hpp"
#include "weft/swarm/sim/worker_traces.hpp"

namespace sim = weft::swarm::sim;

namespace {

struct settings {
    bool quick = false;  // shorter runs and fewer points: the smoke test
    std::string svg;
};

// Four stages of equal work: a transformer's blocks split evenly, the last stage's extra
// output layer balanced by one block fewer. Times are those of a mid-range GPU at speed 1.
constexpr int microbatches_per_step = 1024;
constexpr int in_flight = 96;  // swarm_train --in-flight
sim::swarm_model base_model(double duration) {
    sim::swarm_model m;
    m.forward_seconds = {0.1, 0.1, 0.1, 0.4 / 3};  // every stage: 0.4 s of work a micro-batch
    m.latency_seconds = 0.01;
    m.download_seconds = 20;
    m.microbatches_per_step = microbatches_per_step;
    m.in_flight = in_flight;
    m.apply_seconds = 0.5;
    m.duration_seconds = duration;
    return m;
}
std::string hours(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%g h", seconds / 3600);
    return text;
}

// ---- 1. throughput against the failure rate ------------------------------------------------
void failure_rates(const settings& s) {
    const double duration = s.quick ? 1800 : 4 * 3600;
    const std::vector<double> rates =
        s.quick ? std::vector<double>{0, 1} : std::vector<double>{0, 0.1, 0.25, 0.5, 1, 2};
    const int stages = 4, replicas = 8;
    const std::vector<double> speeds(std::size_t(stages * replicas), 1.0);
    const double replace_seconds = 60;
    sim::static_pipeline_model baseline{.forward_seconds = {0.1, 0.1, 0.1, 0.4 / 3},
                                        .backward_multiple = 2,
                                        .latency_seconds = 0.01,
                                        .replicas = replicas,
                                        .microbatches_per_step = microbatches_per_step,
                                        .apply_seconds = 0.5,
                                        .checkpoint_seconds = 30,
                                        .restart_seconds = replace_seconds + 60,
                                        .checkpoint_interval = 0,
                                        .duration_seconds = duration};
    std::printf("### Throughput against the failure rate\n\n");
    std::printf(
        "%d workers of equal speed, %d stages of 0.4 s of work a micro-batch at speed 1, steps of %d "
        "micro-batches, %s. A failed worker is replaced %.0f s later. SWARM: %d micro-batches in flight; "
        "the replacement joins the most loaded stage after a %.0f s download; rebalancing every 300 s. "
        "1F1B: %d pipelines of %d stages, a checkpoint every Young's interval (30 s to write one), %.0f s "
        "to restart from it.\n\n",
        stages * replicas, stages, microbatches_per_step, hours(duration).c_str(), replace_seconds, in_flight,
        base_model(duration).download_seconds, replicas, stages, baseline.restart_seconds);
    std::printf(
        "| failures per worker-hour | SWARM micro-batches/s | 1F1B + restart micro-batches/s | SWARM / 1F1B | "
        "1F1B restarts | SWARM retried calls | SWARM redone backwards |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    weft::io::line_series swarm_line{.label = "SWARM", .points = {}};
    weft::io::line_series static_line{.label = "1F1B, restart from checkpoint", .points = {}};
    for (const double rate : rates) {
        const auto trace = sim::failures_at_rate(speeds, stages, rate, replace_seconds, duration, 7);
        sim::swarm_model m = base_model(duration);
        m.rebalance_seconds = 300;
        const auto swarm = sim::simulate(m, trace.workers);
        const double job_mtbf = rate > 0 ? 3600 / (rate * static_cast<double>(speeds.size())) : 0;
        const auto fixed = sim::simulate_static(baseline, trace.failures, job_mtbf);
        std::printf("| %.2f | %.2f | %.2f | %.2f | %lld | %lld | %lld |\n", rate, swarm.microbatches_per_second(),
                    fixed.microbatches_per_second(), swarm.microbatches_per_second() / fixed.microbatches_per_second(),
                    fixed.restarts, swarm.retried_calls, swarm.redone_backwards);
        swarm_line.points.emplace_back(rate, swarm.microbatches_per_second());
        static_line.points.emplace_back(rate, fixed.microbatches_per_second());
    }
    std::printf("\n");
    if (!s.svg.empty()) {
        const weft::io::line_chart chart{.title = "Throughput against failures (32 workers, 4 stages, simulated)",
                                         .x_label = "failures per worker-hour",
                                         .y_label = "micro-batches per second",
                                         .series = {swarm_line, static_line},
                                         .y_from_zero = true,
                                         .width = 640,
                                         .height = 400};
        const std::string text = weft::io::render_line_chart(chart);
        weft::io::write_file_atomically(s.svg, std::as_bytes(std::span<const char>(text)));
        std::printf("(plot: %s)\n\n", s.svg.c_str());
    }
}

// ---- 2. percent of the optimum on a preemption trace ---------------------------------------
// What no policy of this step structure passes on the trace, each measured apart: the
// placement whole workers allow (sim/placement_ceiling.hpp), the throughput exact
// (synchronous) steps leave with no failure at all, and rebalancing as often as steps end.
void ceilings(double duration, const std::vector<double>& speeds, const std::vector<sim::sim_worker>& trace) {
    const double whole = sim::whole_worker_placement_fraction(base_model(duration), trace);
    // The same workers, up the whole run and evenly placed: each stage gets a third of each kind.
    const std::size_t stages = base_model(duration).forward_seconds.size();
    std::vector<sim::sim_worker> calm;
    for (std::size_t i = 0; i < speeds.size(); ++i)
        calm.push_back({.speed = speeds[i], .stage = static_cast<int>(i % stages), .up = {{0.0, INFINITY}}});
    const auto barrier = sim::simulate(base_model(duration), calm);
    sim::swarm_model every_step = base_model(duration);
    every_step.rebalance_seconds = 1e-9;  // at every step's end
    const auto eager = sim::simulate(every_step, trace);
    std::printf("What bounds the table above, each measured on its own:\n\n");
    std::printf("| ceiling | %% of optimum |\n|---|---:|\n");
    std::printf("| whole workers divided afresh at every instant, with no download (placement's ceiling) | %.1f |\n",
                100 * whole);
    std::printf("| the same workers up all along, evenly placed, no failure (exact steps' ceiling) | %.1f |\n",
                100 * barrier.fraction_of_optimal());
    std::printf("| both together (their product, an estimate) | %.1f |\n", 100 * whole * barrier.fraction_of_optimal());
    std::printf("| the trace, rebalancing at every step's end | %.1f (placement %.1f) |\n",
                100 * eager.fraction_of_optimal(), 100 * eager.placement_fraction_of_optimal());
    std::printf("\n");
}

void preemption(const settings& s) {
    const double duration = s.quick ? 1800 : 6 * 3600;
    // 48 preemptible instances of three kinds: up for 2 h on average, then preempted for 30 min.
    std::vector<double> speeds;
    for (int i = 0; i < 48; ++i) speeds.push_back(i % 3 == 0 ? 2.0 : i % 3 == 1 ? 0.5 : 1.0);
    const auto workers = sim::preemptible(speeds, 7200, 1800, duration, 11);
    std::printf("### Percent of the optimum on a preemption trace\n\n");
    std::printf(
        "48 preemptible workers (a third twice as fast, a third half as fast), each up for 2 h and then "
        "preempted for 30 min on average, %s, 4 stages, the same model and steps as above; arrivals join "
        "the most loaded stage after a 20 s download. The optimum is the fluid bound: every worker up "
        "computing without pause, perfectly divided among the stages. *Placement* is what the workers' "
        "stages allowed (the slowest stage's ready workers computing without pause); the rest of the gap is "
        "execution: step barriers, calls lost with a departing worker and their timeouts, redone "
        "backwards.\n\n",
        hours(duration).c_str());
    std::printf(
        "| rebalancing | micro-batches/s | %% of optimum | placement, %% of optimum | moves | arrivals | "
        "departures | retried calls | redone backwards |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const double period : {0.0, 300.0, 60.0}) {
        sim::swarm_model m = base_model(duration);
        m.rebalance_seconds = period;
        const auto r = sim::simulate(m, workers);
        const std::string label = period == 0 ? "never" : "every " + std::to_string(int(period)) + " s";
        std::printf("| %s | %.2f | %.1f | %.1f | %lld | %lld | %lld | %lld | %lld |\n", label.c_str(),
                    r.microbatches_per_second(), 100 * r.fraction_of_optimal(), 100 * r.placement_fraction_of_optimal(),
                    r.moves, r.arrivals, r.departures, r.retried_calls, r.redone_backwards);
    }
    std::printf("\n");
    ceilings(duration, speeds, workers);
}

// ---- 3. IWRR against uniform round-robin -----------------------------------------------------
void routing(const settings& s) {
    const double duration = s.quick ? 1800 : 3600;
    // Each stage's eight workers: two fast, four ordinary, a slow one and a very slow one.
    const std::vector<double> pool{2, 2, 1, 1, 1, 1, 0.5, 0.25};
    std::vector<sim::sim_worker> workers;
    for (int k = 0; k < 4; ++k)
        for (const double speed : pool) workers.push_back({.speed = speed, .stage = k, .up = {{0.0, INFINITY}}});
    std::printf("### Interleaved weighted round-robin against uniform round-robin\n\n");
    std::printf(
        "4 stages of 8 workers of speeds 2, 2, 1, 1, 1, 1, 0.5 and 0.25, no failures, no rebalancing, "
        "%s.\n\n",
        hours(duration).c_str());
    std::printf("| routing | micro-batches/s | %% of optimum | retried calls |\n|---|---:|---:|---:|\n");
    for (const auto policy : {weft::swarm::routing_rule::iwrr, weft::swarm::routing_rule::round_robin}) {
        sim::swarm_model m = base_model(duration);
        m.routing = policy;
        const auto r = sim::simulate(m, workers);
        std::printf("| %s | %.2f | %.1f | %lld |\n",
                    policy == weft::swarm::routing_rule::iwrr ? "IWRR" : "uniform round-robin",
                    r.microbatches_per_second(), 100 * r.fraction_of_optimal(), r.retried_calls);
    }
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) {
            s.quick = true;
        } else if (std::strcmp(argv[i], "--svg") == 0 && i + 1 < argc) {
            s.svg = argv[++i];
        } else {
            std::fprintf(stderr, "bench_swarm: unknown argument '%s'; usage: bench_swarm [--quick] [--svg FILE]\n",
                         argv[i]);
            return 2;
        }
    }
    try {
        // Before the simulations, not after them: the plot's file must be one we can write.
        if (!s.svg.empty()) weft::io::require_writable(s.svg, "--svg");
        failure_rates(s);
        preemption(s);
        routing(s);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_swarm: %s\n", e.what());
        return 1;
    }
    return 0;
}
