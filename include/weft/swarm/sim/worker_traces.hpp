// When simulated workers are up: the traces bench_swarm runs SWARM and its baseline over.
// Random but reproducible: every draw comes from a seeded mt19937_64 (whose output the
// standard fixes) through -log(1 - u), not from a library's distribution classes, so a seed
// gives the same trace on every platform.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/sim/virtual_swarm.hpp"

namespace weft::swarm::sim {

namespace detail {
class exponential_draws {
public:
    explicit exponential_draws(std::uint64_t seed) : engine_(seed) {}
    // A draw of mean `mean` seconds.
    double operator()(double mean) {
        const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;  // [0, 1)
        return -mean * std::log1p(-u);
    }
    double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

private:
    std::mt19937_64 engine_;
};
}  // namespace detail

struct failure_trace {
    std::vector<sim_worker> workers;
    std::vector<double> failures;  // every failure, in time order, for the static baseline
};

// `speeds.size()` workers, placed round-robin over `stages` at the start, each failing at
// `failures_per_hour` (a Poisson process per worker) and replaced by a fresh worker of the
// same speed `replace_seconds` later, which joins where the join rule sends it.
[[nodiscard]] inline failure_trace failures_at_rate(const std::vector<double>& speeds, int stages,
                                                    double failures_per_hour, double replace_seconds,
                                                    double duration_seconds, std::uint64_t seed) {
    require(!speeds.empty(), "speeds", speeds.size(), "must hold at least one worker");
    require(stages >= 1, "stages", stages, "must be at least 1");
    require(failures_per_hour >= 0 && std::isfinite(failures_per_hour), "failures_per_hour", failures_per_hour,
            "must be finite and >= 0");
    require(replace_seconds >= 0, "replace_seconds", replace_seconds, "must be >= 0");
    detail::exponential_draws draw(seed);
    failure_trace trace;
    for (std::size_t i = 0; i < speeds.size(); ++i) {
        sim_worker w{.speed = speeds[i], .stage = static_cast<int>(i % std::size_t(stages)), .up = {}};
        double arrive = 0;
        while (arrive < duration_seconds) {
            const double leave = failures_per_hour > 0 ? arrive + draw(3600 / failures_per_hour) : INFINITY;
            w.up.emplace_back(arrive, leave);
            if (leave >= duration_seconds) break;
            trace.failures.push_back(leave);
            arrive = leave + std::max(replace_seconds, 1e-9);
        }
        trace.workers.push_back(std::move(w));
    }
    std::sort(trace.failures.begin(), trace.failures.end());
    return trace;
}

// Preemptible instances: `speeds.size()` slots, each alternating between up (mean
// `mean_up_seconds`) and preempted (mean `mean_down_seconds`), starting in either state with
// its long-run odds. Every arrival joins where the join rule sends it.
[[nodiscard]] inline std::vector<sim_worker> preemptible(const std::vector<double>& speeds, double mean_up_seconds,
                                                         double mean_down_seconds, double duration_seconds,
                                                         std::uint64_t seed) {
    require(!speeds.empty(), "speeds", speeds.size(), "must hold at least one worker");
    require(mean_up_seconds > 0, "mean_up_seconds", mean_up_seconds, "must be > 0");
    require(mean_down_seconds > 0, "mean_down_seconds", mean_down_seconds, "must be > 0");
    detail::exponential_draws draw(seed);
    const double up_odds = mean_up_seconds / (mean_up_seconds + mean_down_seconds);
    std::vector<sim_worker> workers;
    for (const double speed : speeds) {
        sim_worker w{.speed = speed, .stage = -1, .up = {}};
        double t = draw.uniform() < up_odds ? 0.0 : draw(mean_down_seconds);
        while (t < duration_seconds) {
            const double leave = t + draw(mean_up_seconds);
            w.up.emplace_back(t, leave);
            t = leave + draw(mean_down_seconds);
        }
        workers.push_back(std::move(w));
    }
    return workers;
}

}  // namespace weft::swarm::sim
