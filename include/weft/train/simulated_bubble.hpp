// The bubble the timed simulator predicts for a step's program at the compute costs its ranks
// measured, set beside the measured one in the step log: the gap between them is what the
// transport and the host add (messages cost nothing in the simulation).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "weft/sched/cost_model.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/simulate.hpp"

namespace weft::train {

// A step's compute seconds per pipeline rank, by kind: the slots of one rank in a cost vector.
inline constexpr std::size_t kinds_timed = 4;
enum class timed_kind : std::size_t { forward = 0, backward = 1, backward_input = 2, backward_weight = 3 };

// The simulated idle fraction of `program` in the step log's terms, the mean over its ranks of
// 1 - busy / makespan, from `costs`: kinds_timed seconds per pipeline rank (timed_kind order),
// each summed over the step's micro-batches and the rank's chunks. A full backward B (the
// simulator's T_B + T_W) is split evenly between the two. -1 where a rank's forwards were not
// timed (a GPU backend's compute is not timed by kind).
[[nodiscard]] inline double simulated_bubble(const sched::program& program, std::span<const double> costs) {
    const int ranks = program.num_ranks;
    if (costs.size() != kinds_timed * static_cast<std::size_t>(ranks) || program.num_microbatches <= 0) return -1;
    const double m = program.num_microbatches;
    constexpr double least = 1e-9;  // a kind the program does not run: the simulator wants costs > 0
    sched::cost_model model;
    for (int r = 0; r < ranks; ++r) {
        const auto of = [&](timed_kind kind) {
            return costs[kinds_timed * static_cast<std::size_t>(r) + static_cast<std::size_t>(kind)] / m;
        };
        const double half_backward = of(timed_kind::backward) / 2;
        const sched::rank_stage_cost cost{
            .forward = of(timed_kind::forward),
            .backward_input = std::max(of(timed_kind::backward_input) + half_backward, least),
            .backward_weight = std::max(of(timed_kind::backward_weight) + half_backward, least)};
        if (!(cost.forward > 0)) return -1;
        model.per_rank.push_back(cost);
    }
    const sched::simulation sim = sched::simulate(program, model);
    if (!(sim.makespan > 0)) return -1;
    double idle = 0;
    for (const double busy : sim.busy) idle += 1.0 - busy / sim.makespan;
    return idle / ranks;
}

}  // namespace weft::train
