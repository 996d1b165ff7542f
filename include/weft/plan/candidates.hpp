// The layouts the planner considers: every pp x dp x tp of 1..world ranks, ZeRO stage, schedule
// of the engine's set, chunks per rank and micro-batches of a search space, kept when the
// engine itself accepts them (Engine::layout_type::layout_of, what run::check_layout and
// engine.reconfigure use), so the planner never picks a layout the engine refuses. Generic
// over the engine type; nothing is built and nothing is collective.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/core/type_list.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/plan/candidate.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/train/engine_options.hpp"

namespace weft::plan {

// What the planner searches; an empty list takes the default.
struct search_space {
    std::vector<std::string> schedules;  // names; default: every schedule of the engine's set
    std::vector<int> microbatches;       // default: 1, 2, 4, 8, 16
    std::vector<int> chunks;             // default: 1, 2 (each schedule takes those it can run)
    std::vector<int> zero_stages;        // default: 0, 1, 2, 3
    int top = 1;                         // how many layouts plan_layouts returns
    bool prune = true;                   // false: simulate every valid layout (for checks)
};

// The micro-batch counts around the current one, for search_space::microbatches: half of it,
// itself, twice and four times (those >= 1). What an elastic event searches when it keeps its
// batch and its micro-batches may change with the layout.
[[nodiscard]] inline std::vector<int> microbatches_around(int current) {
    require(current >= 1, "microbatches", current, "must be >= 1");
    std::vector<int> out;
    if (current >= 2) out.push_back(current / 2);
    out.push_back(current);
    if (current <= (1 << 18)) {
        out.push_back(current * 2);
        out.push_back(current * 4);
    }
    return out;
}

// A layout the engine accepts, with its ownership map (what it holds on which rank).
struct enumerated_layout {
    layout_candidate candidate;
    elastic::layout layout;
    int schedule_index = 0;  // place of its schedule in the engine's set
};

// The engine's schedules as (kind, place in its set).
template <class Engine>
[[nodiscard]] std::vector<schedule_kind> engine_schedules() {
    std::vector<schedule_kind> kinds;
    for_each_type(typename Engine::schedules::members{},
                  [&kinds]<class S>(std::type_identity<S>) { kinds.push_back(S::kind); });
    return kinds;
}

// The ones `names` asks for (all when empty), in the engine's order, with their places;
// weft::error naming "schedule" for a name the engine was not compiled for.
template <class Engine>
[[nodiscard]] std::vector<std::pair<schedule_kind, int>> chosen_schedules(const std::vector<std::string>& names) {
    const std::vector<schedule_kind> all = engine_schedules<Engine>();
    for (const std::string& name : names) {
        bool known = false;
        for (const schedule_kind& k : all) known = known || k.name() == name;
        if (!known)
            throw invalid_argument("schedule", name, "this engine was compiled for: " + Engine::schedules::names());
    }
    std::vector<std::pair<schedule_kind, int>> out;
    for (std::size_t i = 0; i < all.size(); ++i) {
        bool wanted = names.empty();
        for (const std::string& name : names) wanted = wanted || all[i].name() == name;
        if (wanted) out.emplace_back(all[i], static_cast<int>(i));
    }
    return out;
}

// The layout `l`, checked by the engine: its ownership map, or the engine's weft::error.
template <class Engine>
[[nodiscard]] enumerated_layout enumerate_one(const layout_candidate& l, const typename Engine::model_config& model,
                                              const train::engine_options& options, int schedule_index = 0) {
    return {l, Engine::layout_type::layout_of(l.config(), model, options), schedule_index};
}

namespace detail {

inline void check_counts(const std::vector<int>& values, const char* name, int low, int high) {
    for (int v : values) require(v >= low && v <= high, name, v, "must be in [" + std::to_string(low) + ", " +
                                                                     std::to_string(high) + "]");
}

}  // namespace detail

// Calls visit(const enumerated_layout&) for every layout of `space` on 1..world ranks that the
// engine accepts, in a fixed order (ranks, pp, dp, ZeRO, schedule, chunks, micro-batches), one
// at a time (an ownership map of many ranks is large). ZeRO > 0 with dp = 1 is left out: it
// shards over one rank, as fast as ZeRO-0 with more memory (tests/plan checks the planner's
// choice against a search that keeps it). Throws weft::error naming a bad parameter of the
// space.
template <class Engine, class Visit>
void for_each_valid_layout(int world, const typename Engine::model_config& model,
                           const train::engine_options& options, const search_space& space, Visit&& visit) {
    require(world >= 1, "world", world, "must be at least 1 rank");
    const std::vector<int> microbatches = space.microbatches.empty() ? std::vector<int>{1, 2, 4, 8, 16}
                                                                     : space.microbatches;
    const std::vector<int> chunks = space.chunks.empty() ? std::vector<int>{1, 2} : space.chunks;
    const std::vector<int> zeros = space.zero_stages.empty() ? std::vector<int>{0, 1, 2, 3} : space.zero_stages;
    detail::check_counts(microbatches, "microbatches", 1, 1 << 20);
    detail::check_counts(chunks, "chunks", 1, 1 << 10);
    detail::check_counts(zeros, "zero_stage", 0, 3);
    const auto schedules = chosen_schedules<Engine>(space.schedules);

    for (int ranks = 1; ranks <= world; ++ranks)
        for (int pp = 1; pp <= ranks; ++pp) {
            if (ranks % pp != 0) continue;
            for (int dp = 1; dp <= ranks / pp; ++dp) {
                if ((ranks / pp) % dp != 0) continue;
                const int tp = ranks / pp / dp;
                for (int zero : zeros) {
                    if (zero > 0 && dp == 1) continue;
                    for (const auto& [kind, index] : schedules)
                        for (int v : chunks)
                            for (int m : microbatches) {
                                // The engine's own checks refuse these too; skipped without a throw.
                                if (options.batch_size % (dp * m) != 0) continue;
                                const layout_candidate l{.world = ranks, .pp = pp, .dp = dp, .tp = tp, .zero = zero,
                                                         .schedule = kind, .chunks = v, .microbatches = m};
                                std::optional<enumerated_layout> valid;
                                try {
                                    valid.emplace(enumerate_one<Engine>(l, model, options, index));
                                } catch (const error&) {
                                    continue;  // the engine cannot run it (chunks, micro-batches, tp, units...)
                                }
                                visit(*valid);
                            }
                }
            }
        }
}

// The same as a list (every ownership map at once: for small worlds and checks).
template <class Engine>
[[nodiscard]] std::vector<enumerated_layout> valid_layouts(int world, const typename Engine::model_config& model,
                                                           const train::engine_options& options,
                                                           const search_space& space) {
    std::vector<enumerated_layout> out;
    for_each_valid_layout<Engine>(world, model, options, space,
                                  [&out](const enumerated_layout& e) { out.push_back(e); });
    return out;
}

// Compute-only programs by (schedule, pp, micro-batches, chunks), generated as the engine
// generates its own (the schedule set's generator, default costs), once each.
template <class Engine>
class program_cache {
public:
    [[nodiscard]] const sched::program& get(const layout_candidate& l) {
        const auto key = std::make_tuple(std::string(l.schedule.name()), l.pp, l.microbatches, l.chunks);
        auto found = programs_.find(key);
        if (found == programs_.end())
            found = programs_
                        .emplace(key, Engine::schedules::generate(
                                          l.schedule, sched::schedule_params{.ranks = l.pp,
                                                                             .microbatches = l.microbatches,
                                                                             .chunks = l.chunks}))
                        .first;
        return found->second;
    }

private:
    std::map<std::tuple<std::string, int, int, int>, sched::program> programs_;
};

}  // namespace weft::plan
