// The planner's price of one layout: its step time from the timed simulator (sched::simulate)
// over per-rank costs, plus the data-parallel gradient synchronisation and the optimizer
// step; and its peak bytes per rank, the ZeRO formulas' peak (shard::zero_memory_of) of the
// stages each rank holds (elastic::layout::holdings) plus the simulator's peak of stashed
// micro-batches times their activations (plan/model_shape.hpp).
//
// What is approximated: the data-parallel reduction is not overlapped with the backward (the
// engine starts its buckets at REDUCE_GRAD, so this is pessimistic for replicate); a ring's
// 2(n-1)/n of the bytes for an all-reduce and for ZeRO-1/2's reduce-scatter + all-gather,
// 3(n-1)/n for ZeRO-3 (the parameters gathered once more); tensor parallelism splits compute
// and activations evenly and adds two all-reduces per block forward and two per backward.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/plan/candidate.hpp"
#include "weft/plan/cost_model.hpp"
#include "weft/plan/model_shape.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/shard/zero_memory.hpp"

namespace weft::plan {

struct layout_estimate {
    double step_ms = 0;      // pipeline_ms + sync_ms + optimizer_ms
    double pipeline_ms = 0;  // the simulated program's makespan
    double sync_ms = 0;      // data-parallel gradient synchronisation (slowest rank)
    double optimizer_ms = 0; // optimizer step (slowest rank)
    double bubble = 0;       // the simulation's bubble rate (of the rank with the longest span)
    // The pipeline ranks' mean idle fraction of the program: what a step log's "bubble" measures
    // (train::layout_engine's idle fraction, averaged over the ranks).
    double mean_idle = 0;
    std::size_t peak_bytes = 0;        // the largest peak of any rank: state + activations
    std::size_t state_peak_bytes = 0;  // parameters, gradients, optimizer state at that rank's peak
    std::size_t activation_bytes = 0;  // its stashed activations at their peak
};

// What prices a layout besides the layout: the model's shape, the engine's batch and
// optimizer, its scalar's size, the cost model.
struct pricing {
    model_shape shape;
    int batch_size = 1;
    std::size_t optimizer_states_per_element = 2;  // AdamW 2, SGD with momentum 1, without 0
    std::size_t scalar_bytes = 4;
    cost_model costs;
};

[[nodiscard]] inline std::size_t optimizer_states_of(const optim::optimizer_options& o) {
    if (o.kind == optim::optimizer_kind::adamw) return 2;
    return o.momentum != 0 ? 1 : 0;
}

namespace detail {

[[nodiscard]] inline double slowdown(const cost_model& c, int ranks) {
    return c.cores > 0 && ranks > c.cores ? static_cast<double>(ranks) / c.cores : 1.0;
}

// One collective over n ranks moving `bytes` through a ring, `volume` times 2(n-1)/n of them.
[[nodiscard]] inline double collective_ms(const cost_model& c, double bytes, int n, double volume = 1) {
    if (n <= 1) return 0;
    return c.allreduce_latency_us * 1e-3 + volume * 2.0 * (n - 1) / n * bytes / (c.allreduce_gbytes_per_s * 1e6);
}

struct rank_share {
    double cost = 0;               // fraction of the model's cost
    double activation_elements = 0;  // per row, whole share
    double tp_elements = 0;        // per row, per forward
    int tp_collectives = 0;        // all-reduces per forward (as many per backward)
};

[[nodiscard]] inline std::vector<rank_share> rank_shares(const elastic::layout& layout, const model_shape& shape) {
    double total = 0;
    for (const unit_shape& u : shape.units) total += u.cost;
    require(total > 0, "model_shape cost", total, "the units' costs must sum to more than 0");
    std::vector<rank_share> shares(static_cast<std::size_t>(layout.config().pp()));
    for (int s = 0; s < layout.num_stages(); ++s) {
        rank_share& share = shares[static_cast<std::size_t>(layout.stage_rank()[static_cast<std::size_t>(s)])];
        const nn::unit_range units = layout.units()[static_cast<std::size_t>(s)];
        for (int u = units.first; u < units.last; ++u) {
            const unit_shape& unit = shape.units.at(static_cast<std::size_t>(u));
            share.cost += unit.cost / total;
            share.activation_elements += unit.activation_elements_per_row;
            share.tp_elements += unit.tp_allreduce_elements_per_row;
            if (unit.tp_allreduce_elements_per_row > 0) share.tp_collectives += 2;  // a block: attention, MLP
        }
    }
    return shares;
}

}  // namespace detail

// The simulator's costs of `layout` (ms per micro-batch of each pipeline rank's whole share).
[[nodiscard]] inline sched::cost_model pipeline_costs(const layout_candidate& l, const elastic::layout& layout,
                                                      const pricing& p) {
    const cost_model& c = p.costs;
    const double rows = static_cast<double>(p.batch_size) / (l.dp * l.microbatches);
    const double slow = detail::slowdown(c, l.world);
    sched::cost_model out;
    out.comm = c.p2p_latency_us * 1e-3 +
               rows * p.shape.boundary_elements_per_row * static_cast<double>(p.scalar_bytes) / (c.p2p_gbytes_per_s * 1e6);
    for (const detail::rank_share& share : detail::rank_shares(layout, p.shape)) {
        const double scale = rows * share.cost / l.tp * slow;
        const double tp_bytes = rows * share.tp_elements * static_cast<double>(p.scalar_bytes);
        // The tp collectives of one pass: their latencies and the bytes of all of them.
        const double tp_ms = l.tp <= 1 ? 0.0
                                        : share.tp_collectives * c.allreduce_latency_us * 1e-3 +
                                              2.0 * (l.tp - 1) / l.tp * tp_bytes / (c.allreduce_gbytes_per_s * 1e6);
        // A rank without units (cannot happen in a layout the engine accepts) still costs > 0.
        out.per_rank.push_back({.forward = std::max(c.forward_ms_per_sample * scale + tp_ms, 1e-12),
                                .backward_input = std::max(c.backward_input_ms_per_sample * scale + tp_ms, 1e-12),
                                .backward_weight = std::max(c.backward_weight_ms_per_sample * scale, 1e-12)});
    }
    return out;
}

// What one rank costs besides its pipeline program: data-parallel synchronisation, optimizer
// step, and its parameters, gradients and optimizer state at their peak.
struct rank_costs {
    int pp_index = 0;
    double sync_ms = 0;
    double optimizer_ms = 0;
    std::size_t state_bytes = 0;
};

// What a layout is priced from, without its ownership map (which is large on many ranks): the
// simulator's costs, the costs of the ranks that bound the maxima, and the activations per
// row of each pipeline rank's whole share.
struct layout_parts {
    sched::cost_model pipeline;
    // One rank per (pipeline, tensor-parallel) index, the first of its data-parallel group: it
    // holds the longest ZeRO range (shard_of's first ranges are whole), so its state and
    // optimizer step are the most of the group, and everything else is the same across it.
    std::vector<rank_costs> ranks;
    std::vector<double> activation_elements;  // per pipeline rank: per row, its whole share
};

[[nodiscard]] inline layout_parts parts_of(const layout_candidate& l, const elastic::layout& layout,
                                           const pricing& p) {
    const cost_model& c = p.costs;
    const double slow = detail::slowdown(c, l.world);
    layout_parts parts;
    parts.pipeline = pipeline_costs(l, layout, p);
    for (const detail::rank_share& share : detail::rank_shares(layout, p.shape))
        parts.activation_elements.push_back(share.activation_elements);
    for (int pp_index = 0; pp_index < l.pp; ++pp_index)
        for (int tp_index = 0; tp_index < l.tp; ++tp_index) {
            const int r = pp_index * l.dp * l.tp + tp_index;  // data-parallel index 0 (comm::process_grid)
            rank_costs rc{.pp_index = pp_index};
            double grad_bytes = 0;
            double stepped = 0;
            for (const elastic::stage_holding& h : layout.holdings(r)) {
                const std::size_t total = h.registry.total_size();
                rc.state_bytes += shard::zero_memory_of(l.zero, total, l.dp, 0, p.optimizer_states_per_element,
                                                        p.scalar_bytes)
                                      .peak.total();
                grad_bytes += static_cast<double>(total * p.scalar_bytes);
                stepped += static_cast<double>(l.zero == 0 ? total : h.range.valid());
            }
            rc.sync_ms = detail::collective_ms(c, grad_bytes, l.dp, l.zero == 3 ? 1.5 : 1.0);
            rc.optimizer_ms = stepped * c.optimizer_ns_per_element * 1e-6 * slow;
            parts.ranks.push_back(rc);
        }
    return parts;
}

// The largest state bytes of any rank: a lower bound of the peak, known before simulating.
[[nodiscard]] inline std::size_t state_peak_bytes(const layout_parts& parts) {
    std::size_t most = 0;
    for (const rank_costs& r : parts.ranks) most = std::max(most, r.state_bytes);
    return most;
}

// A lower bound of the step time, known before simulating: the busiest pipeline rank's
// compute, plus the slowest synchronisation and optimizer step.
[[nodiscard]] inline double step_ms_lower_bound(const layout_candidate& l, const layout_parts& parts) {
    double busiest = 0;
    for (const sched::rank_stage_cost& r : parts.pipeline.per_rank)
        busiest = std::max(busiest, l.microbatches * (r.forward + r.backward_input + r.backward_weight));
    double sync = 0, optimizer = 0;
    for (const rank_costs& r : parts.ranks) {
        sync = std::max(sync, r.sync_ms);
        optimizer = std::max(optimizer, r.optimizer_ms);
    }
    return busiest + sync + optimizer;
}

// The whole estimate of `l` from its parts, whose compute-only program (as the engine
// generates it) is `program`.
[[nodiscard]] inline layout_estimate estimate(const layout_candidate& l, const layout_parts& parts,
                                              const sched::program& program, const pricing& p) {
    const sched::simulation sim = sched::simulate(program, parts.pipeline);
    const double rows = static_cast<double>(p.batch_size) / (l.dp * l.microbatches);
    layout_estimate e;
    e.pipeline_ms = sim.makespan;
    e.bubble = sim.bubble_rate;
    for (const double busy : sim.busy)
        e.mean_idle += sim.makespan > 0 ? (1 - busy / sim.makespan) / static_cast<double>(sim.busy.size()) : 0.0;
    for (const rank_costs& rc : parts.ranks) {
        e.sync_ms = std::max(e.sync_ms, rc.sync_ms);
        e.optimizer_ms = std::max(e.optimizer_ms, rc.optimizer_ms);
        const auto pp_index = static_cast<std::size_t>(rc.pp_index);
        const auto activations =
            static_cast<std::size_t>(sim.peak_activations[pp_index] * rows * parts.activation_elements[pp_index] /
                                     l.tp * static_cast<double>(p.scalar_bytes));
        if (rc.state_bytes + activations > e.peak_bytes) {
            e.peak_bytes = rc.state_bytes + activations;
            e.state_peak_bytes = rc.state_bytes;
            e.activation_bytes = activations;
        }
    }
    e.step_ms = e.pipeline_ms + e.sync_ms + e.optimizer_ms;
    return e;
}

// The same from the layout's ownership map.
[[nodiscard]] inline layout_estimate estimate(const layout_candidate& l, const elastic::layout& layout,
                                              const sched::program& program, const pricing& p) {
    return estimate(l, parts_of(l, layout, p), program, p);
}

}  // namespace weft::plan
