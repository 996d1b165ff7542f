// What whole workers allow: the throughput of a worker trace if, at every instant, the
// workers up were divided among the stages afresh and for free (no download, no wait for a
// step's end), as a fraction of the fluid optimum (swarm/sim/virtual_swarm.hpp).
//
// The fluid optimum divides worker speed as if it were a liquid; real workers are whole, so
// a stage gets a 2x worker or not. This is the ceiling that granularity leaves for any
// placement policy, the join rule and the rebalancer included: bench_swarm prints it beside
// their placement so that the gap between the two is what the policy loses, not what the
// trace forbids.
//
// Each instant's division is greedy, largest worker first onto the stage whose rate (its
// speed over its work) is least, among equals the one with the most work (LPT for max-min). That is a division whole
// workers can take, so the figure is reachable by an oracle; the best division may be a little higher still, never
// above 1.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/sim/virtual_swarm.hpp"

namespace weft::swarm::sim {

namespace detail {
// The slowest stage's micro-batches per second with `speeds` divided greedily over stages of
// `stage_work` seconds (at speed 1) a micro-batch.
[[nodiscard]] inline double whole_worker_rate(std::vector<double> speeds, const std::vector<double>& stage_work) {
    std::sort(speeds.begin(), speeds.end(), std::greater<>());
    std::vector<double> speed(stage_work.size(), 0.0);
    const auto rate = [&](std::size_t k) { return speed[k] / stage_work[k]; };
    for (const double s : speeds) {
        std::size_t slowest = 0;
        for (std::size_t k = 1; k < speed.size(); ++k)  // among equals, the most work: it needs the most
            if (rate(k) < rate(slowest) || (rate(k) == rate(slowest) && stage_work[k] > stage_work[slowest]))
                slowest = k;
        speed[slowest] += s;
    }
    double least = rate(0);
    for (std::size_t k = 1; k < speed.size(); ++k) least = std::min(least, rate(k));
    return least;
}
}  // namespace detail

// The fraction of the fluid optimum that the best free reassignment of whole workers at every
// instant reaches, for `model`'s stages over `workers` until `model.duration_seconds`.
[[nodiscard]] inline double whole_worker_placement_fraction(const swarm_model& model,
                                                            const std::vector<sim_worker>& workers) {
    model.validate();
    require(!workers.empty(), "workers", workers.size(), "must hold at least one worker");
    std::vector<double> stage_work;
    for (std::size_t k = 0; k < model.forward_seconds.size(); ++k) stage_work.push_back(model.stage_work(k));
    const double work_per_microbatch = model.work_per_microbatch();
    // Every instant where who is up changes.
    const double end = model.duration_seconds;
    std::vector<double> times{0.0, end};
    for (std::size_t i = 0; i < workers.size(); ++i) {
        require(workers[i].speed > 0 && std::isfinite(workers[i].speed), "workers[" + std::to_string(i) + "].speed",
                workers[i].speed, "must be finite and > 0");
        for (const auto& [arrive, leave] : workers[i].up) {
            if (arrive < end) times.push_back(arrive);
            if (leave < end) times.push_back(leave);
        }
    }
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    double fluid = 0, whole = 0;
    for (std::size_t i = 0; i + 1 < times.size(); ++i) {
        const double from = times[i], to = times[i + 1];
        std::vector<double> up;
        for (const auto& w : workers)
            for (const auto& [arrive, leave] : w.up)
                if (arrive <= from && from < leave) up.push_back(w.speed);
        double total = 0;
        for (const double s : up) total += s;
        fluid += total / work_per_microbatch * (to - from);
        whole += detail::whole_worker_rate(std::move(up), stage_work) * (to - from);
    }
    return fluid > 0 ? whole / fluid : 0.0;
}

}  // namespace weft::swarm::sim
