// The layout planner: given a world of ranks, a per-rank memory budget, the model, the
// engine's options and a cost model, it enumerates the layouts the engine can run on 1..world
// ranks (plan/candidates.hpp), prices each (plan/estimate.hpp: the timed simulator, the
// ZeRO memory formulas, activations), drops those over the budget and ranks the rest,
// fastest first. Elastic events call choose_layout with the new world size; a layout on fewer
// ranks than the world leaves the others as spares (engine.reconfigure with world_size <
// ranks), and is chosen over a larger one when it is as fast.
//
// Order (deterministic): simulated ms/step (compared at 1 ns), then fewer ranks, smaller peak
// bytes per rank, lower ZeRO stage, smaller pp, smaller tp, fewer micro-batches, fewer chunks,
// and the schedule's place in the engine's set. Layouts that differ only in their schedule and
// price the same (time and peak: on one pipeline rank most schedules run alike) are one
// entry of plan_layouts' list, the schedule first in the engine's set.
//
// Pruning, which never changes the answer (tests/plan compares with an exhaustive search):
// ZeRO > 0 with dp = 1 is left out (it shards over one rank: the same time as ZeRO-0 and more
// memory); a layout whose parameters, gradients and optimizer state alone exceed the budget
// is not simulated; layouts are simulated in the order of a lower bound of their time (the
// busiest rank's compute plus synchronisation and optimizer) and the search stops once that
// bound exceeds the time of the top'th layout found.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/plan/candidate.hpp"
#include "weft/plan/candidates.hpp"
#include "weft/plan/cost_model.hpp"
#include "weft/plan/estimate.hpp"
#include "weft/plan/model_shape.hpp"
#include "weft/train/engine_options.hpp"

namespace weft::plan {

struct planned_layout {
    layout_candidate layout;
    layout_estimate estimate;
    int schedule_index = 0;  // the schedule's place in the engine's set (the last tie-break)
};

// Whether `a` ranks before `b` (the planner's order, above).
[[nodiscard]] inline bool ranks_before(const planned_layout& a, const planned_layout& b) {
    const auto key = [](const planned_layout& p) {
        const layout_candidate& l = p.layout;
        return std::make_tuple(std::llround(p.estimate.step_ms * 1e6), l.world, p.estimate.peak_bytes, l.zero, l.pp,
                               l.tp, l.microbatches, l.chunks, p.schedule_index);
    };
    return key(a) < key(b);
}

// Whether `a` and `b` differ at most in their schedule and price the same: one entry of a list.
[[nodiscard]] inline bool equivalent(const planned_layout& a, const planned_layout& b) {
    const auto key = [](const planned_layout& p) {
        const layout_candidate& l = p.layout;
        return std::make_tuple(std::llround(p.estimate.step_ms * 1e6), p.estimate.peak_bytes, l.world, l.pp, l.dp,
                               l.tp, l.zero, l.chunks, l.microbatches);
    };
    return key(a) == key(b);
}

// "2.0 GiB", "512.0 MiB", "12.3 KiB", "100 B".
[[nodiscard]] inline std::string byte_text(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char text[48];
    std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
    return text;
}

namespace detail {

inline void check_request(int world, long long memory_budget, int top) {
    require(world >= 1, "world", world, "must be at least 1 rank");
    require(memory_budget > 0, "memory_budget", memory_budget, "must be a number of bytes > 0 per rank");
    require(top >= 1, "top", top, "must be at least 1");
}

// Prices one enumerated layout: its compute-only program from the cache, then estimate().
template <class Engine>
[[nodiscard]] planned_layout price(const enumerated_layout& e, program_cache<Engine>& programs, const pricing& p) {
    return {e.candidate, estimate(e.candidate, e.layout, programs.get(e.candidate), p), e.schedule_index};
}

}  // namespace detail

// What prices a layout on an engine of type Engine, from its options and the cost model.
template <class Engine>
[[nodiscard]] pricing pricing_of(const typename Engine::model_config& model, const train::engine_options& options,
                                 const cost_model& costs) {
    costs.validate();
    return {.shape = shape_of(model),
            .batch_size = options.batch_size,
            .optimizer_states_per_element = optimizer_states_of(options.optimizer),
            .scalar_bytes = sizeof(typename Engine::scalar),
            .costs = costs};
}

// The `space.top` fastest layouts of `model` on at most `world` ranks of an Engine whose peak
// bytes per rank are within `memory_budget`, fastest first. Throws weft::error naming the
// parameter for bad input, and, when no layout fits, naming the budget and the smallest peak
// of the valid layouts.
template <class Engine>
[[nodiscard]] std::vector<planned_layout> plan_layouts(int world, long long memory_budget,
                                                       const typename Engine::model_config& model,
                                                       const train::engine_options& options, const cost_model& costs,
                                                       const search_space& space = {}) {
    detail::check_request(world, memory_budget, space.top);
    const pricing p = pricing_of<Engine>(model, options, costs);
    const auto budget = static_cast<std::size_t>(memory_budget);

    // Memory first, then a lower bound of the time, both before simulating.
    struct pending {
        layout_candidate layout;
        int schedule_index;
        layout_parts parts;
        double lower_bound;
    };
    std::vector<pending> order;
    int valid = 0;
    for_each_valid_layout<Engine>(world, model, options, space, [&](const enumerated_layout& e) {
        ++valid;
        layout_parts parts = parts_of(e.candidate, e.layout, p);
        if (space.prune && state_peak_bytes(parts) > budget) return;
        const double bound = step_ms_lower_bound(e.candidate, parts);
        order.push_back({e.candidate, e.schedule_index, std::move(parts), bound});
    });
    if (valid == 0)
        throw invalid_argument("world", world,
                               "no layout of the search space runs this model on 1.." + std::to_string(world) +
                                   " ranks with batch_size " + std::to_string(options.batch_size) +
                                   " (it must be a multiple of dp * microbatches)");
    std::stable_sort(order.begin(), order.end(),
                     [](const pending& a, const pending& b) { return a.lower_bound < b.lower_bound; });

    program_cache<Engine> programs;
    std::vector<planned_layout> best;  // sorted, at most space.top
    for (const pending& next : order) {
        const auto top = static_cast<std::size_t>(space.top);
        // The bound, a little lowered for rounding, more than the order's 1 ns above the top'th
        // time: so is every later one.
        if (space.prune && best.size() == top && next.lower_bound * (1 - 1e-9) > best.back().estimate.step_ms + 1e-6)
            break;
        const planned_layout priced{next.layout, estimate(next.layout, next.parts, programs.get(next.layout), p),
                                    next.schedule_index};
        if (priced.estimate.peak_bytes > budget) continue;
        // An equivalent entry is adjacent in the order: the one ranked first stays.
        const auto at = std::upper_bound(best.begin(), best.end(), priced, ranks_before);
        if (at != best.begin() && equivalent(*(at - 1), priced)) continue;
        if (at != best.end() && equivalent(*at, priced)) best.erase(at);
        best.insert(std::upper_bound(best.begin(), best.end(), priced, ranks_before), priced);
        if (best.size() > top) best.pop_back();
    }
    if (best.empty()) {
        // The smallest peak of any valid layout, simulated (only on this failing path).
        std::size_t smallest = std::numeric_limits<std::size_t>::max();
        for_each_valid_layout<Engine>(world, model, options, space, [&](const enumerated_layout& e) {
            smallest = std::min(smallest, detail::price(e, programs, p).estimate.peak_bytes);
        });
        throw invalid_argument("memory_budget", memory_budget,
                               "no layout on 1.." + std::to_string(world) + " ranks fits in " +
                                   byte_text(static_cast<double>(memory_budget)) +
                                   " per rank; the smallest peak per rank of the " + std::to_string(valid) +
                                   " valid layouts is " + std::to_string(smallest) + " bytes (" +
                                   byte_text(static_cast<double>(smallest)) + ")");
    }
    return best;
}

// The layout to run `model` on at most `world` ranks within `memory_budget` bytes per rank:
// the fastest (plan_layouts' first). Its layout.config() is what engine.reconfigure takes
// (with the world's size as the ranks: those beyond layout.world wait as spares).
template <class Engine>
[[nodiscard]] planned_layout choose_layout(int world, long long memory_budget,
                                           const typename Engine::model_config& model,
                                           const train::engine_options& options, const cost_model& costs,
                                           search_space space = {}) {
    space.top = 1;
    return plan_layouts<Engine>(world, memory_budget, model, options, costs, space).front();
}

// Prices one layout without searching (what a brute force, or a report of one layout, uses):
// checked by the engine (layout_of) as the planner checks it.
template <class Engine>
[[nodiscard]] planned_layout price_layout(const layout_candidate& l, const typename Engine::model_config& model,
                                          const train::engine_options& options, const cost_model& costs) {
    const pricing p = pricing_of<Engine>(model, options, costs);
    const enumerated_layout e = enumerate_one<Engine>(l, model, options);
    program_cache<Engine> programs;
    return detail::price(e, programs, p);
}

}  // namespace weft::plan
