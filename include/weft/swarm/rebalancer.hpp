// Which stage each SWARM worker serves: the rebalancing rule (Ryabinin et al., ICML 2023).
//
// A pipeline runs at the pace of its slowest stage, so a stage's load is how far its pool's
// throughput falls short: the stage with the least throughput (micro-batches per second,
// from its workers' measured call rates) is the most loaded, the one with the most is the
// least loaded. Every rebalancing period one worker moves from a least loaded stage to the
// most loaded one, if that helps: the stage it leaves must stay faster than the one it joins
// was, by a margin, so that two stages never trade a worker back and forth. A stage keeps at
// least one worker, since its parameters live only on its workers. A worker that joins goes
// to the most loaded stage.
//
// A worker's speed on a stage it has not served is guessed from its speed where it is: it
// keeps its ratio to its pool's mean rate. Heterogeneous workers (a fast GPU, a slow one)
// thus move as what they are.
//
// Plain data and no clock, as the router: the real trainer (swarm/net/trainer.hpp) and the
// simulated one (swarm/sim/virtual_swarm.hpp) make the same moves.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/router.hpp"

namespace weft::swarm {

struct worker_rate {
    worker_id id = 0;
    double microbatches_per_second = 0;  // at its stage, from its measured call times
};

// One stage's pool as the rebalancer sees it.
struct stage_load {
    std::vector<worker_rate> workers;

    [[nodiscard]] double microbatches_per_second() const {
        double rate = 0;
        for (const auto& w : workers) rate += w.microbatches_per_second;
        return rate;
    }
    [[nodiscard]] double mean_rate() const {
        return workers.empty() ? 0.0 : microbatches_per_second() / double(workers.size());
    }
};

struct rebalance_options {
    // A move must leave the stage it empties this much faster than the stage it fills was:
    // new_from > (1 + min_gain) * old_to. Keeps noise in the measured rates from moving a
    // worker back and forth.
    double min_gain = 0.05;
};

struct worker_move {
    worker_id worker = 0;
    int from = 0;
    int to = 0;
    double bottleneck_before = 0;  // the pair's slower stage, micro-batches per second
    double bottleneck_after = 0;   // as predicted
};

namespace detail {
inline void check_loads(std::span<const stage_load> stages) {
    require(!stages.empty(), "swarm stages", stages.size(), "must be at least 1");
    for (std::size_t k = 0; k < stages.size(); ++k)
        for (const auto& w : stages[k].workers)
            require(w.microbatches_per_second >= 0 && w.microbatches_per_second < 1e300,
                    "stage " + std::to_string(k) + " worker " + std::to_string(w.id) + " micro-batches per second",
                    w.microbatches_per_second, "must be finite and >= 0");
}
}  // namespace detail

// The calls one micro-batch makes at a stage, by class: a forward and a backward, or at the
// last stage one backward call that does the forward too (swarm/net/trainer.hpp).
[[nodiscard]] inline std::span<const call_class> microbatch_calls(bool last_stage) {
    static constexpr call_class middle[] = {call_class::forward, call_class::backward};
    static constexpr call_class last[] = {call_class::backward};
    return last_stage ? std::span<const call_class>(last) : std::span<const call_class>(middle);
}

// A stage's pool as its router measured it: each of `workers` (those ready to serve) at the
// micro-batches per second its call times give, one call of each class in `per_microbatch`
// a micro-batch (a middle stage: forward and backward; the last: backward). One without a
// time for every class counts at the pool's measured mean, or at 1 / `unmeasured_seconds`
// when no worker has them.
[[nodiscard]] inline stage_load load_from_router(const router& route, std::span<const worker_id> workers,
                                                 std::span<const call_class> per_microbatch,
                                                 double unmeasured_seconds) {
    require(unmeasured_seconds > 0, "unmeasured_seconds", unmeasured_seconds, "must be > 0");
    require(!per_microbatch.empty(), "calls per micro-batch", per_microbatch.size(), "must name at least one class");
    const auto rate_of = [&](worker_id id) -> std::optional<double> {
        double seconds = 0;
        for (const call_class c : per_microbatch) {
            const auto t = route.class_seconds(id, c);
            if (!t) return std::nullopt;
            seconds += *t;
        }
        return seconds > 0 ? std::optional<double>(1 / seconds) : std::nullopt;
    };
    double measured = 0;
    int counted = 0;
    for (const worker_id id : workers)
        if (const auto rate = rate_of(id)) {
            measured += *rate;
            ++counted;
        }
    const double guess = counted > 0 ? measured / counted : 1 / unmeasured_seconds;
    stage_load load;
    for (const worker_id id : workers) load.workers.push_back({id, rate_of(id).value_or(guess)});
    return load;
}

// The most loaded stage: the least throughput; among equals, the fewest workers, then the
// lowest index. Where a joining worker goes.
[[nodiscard]] inline int most_loaded_stage(std::span<const stage_load> stages) {
    detail::check_loads(stages);
    std::size_t best = 0;
    for (std::size_t k = 1; k < stages.size(); ++k) {
        const double rate = stages[k].microbatches_per_second(), best_rate = stages[best].microbatches_per_second();
        if (rate < best_rate || (rate == best_rate && stages[k].workers.size() < stages[best].workers.size())) best = k;
    }
    return static_cast<int>(best);
}

// The one move this period, if any helps: to the most loaded stage, from whichever stage
// and worker leave the slower of the pair fastest (ties: the source left fastest).
[[nodiscard]] inline std::optional<worker_move> plan_move(std::span<const stage_load> stages,
                                                          const rebalance_options& options = {}) {
    require(options.min_gain >= 0, "rebalance min_gain", options.min_gain, "must be >= 0");
    const auto to = static_cast<std::size_t>(most_loaded_stage(stages));
    const stage_load& target = stages[to];
    const double target_rate = target.microbatches_per_second();
    std::optional<worker_move> best;
    double best_left = 0;  // among equal bottlenecks, the move that leaves its source fastest
    for (std::size_t from = 0; from < stages.size(); ++from) {
        const stage_load& source = stages[from];
        if (from == to || source.workers.size() < 2) continue;  // never leave a stage empty
        const double source_rate = source.microbatches_per_second();
        const double source_mean = source.mean_rate();
        for (const auto& w : source.workers) {
            const double left = source_rate - w.microbatches_per_second;
            if (!(left > (1 + options.min_gain) * target_rate)) continue;
            // Its rate on the new stage: the same ratio to that pool's mean (its own rate when
            // the pool is empty or unmeasured).
            const double ratio = source_mean > 0 ? w.microbatches_per_second / source_mean : 1.0;
            const double there = target.mean_rate() > 0 ? ratio * target.mean_rate() : w.microbatches_per_second;
            const double after = std::min(left, target_rate + there);
            if (!best || after > best->bottleneck_after || (after == best->bottleneck_after && left > best_left)) {
                best = worker_move{w.id, static_cast<int>(from), static_cast<int>(to), target_rate, after};
                best_left = left;
            }
        }
    }
    return best;
}

}  // namespace weft::swarm
