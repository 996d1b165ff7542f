// The data-parallel actions of a lowered program, placed where PyTorch's pipelining
// places them: REDUCE_GRAD right after a stage's last weight-gradient action, so its
// reduction travels while the rank's later actions compute; for ZeRO-3, UNSHARD a few
// compute actions ahead of a stage's first use (the all-gather is prefetched) and RESHARD
// right after its last use.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/validate.hpp"

namespace weft::sched {

struct shard_action_options {
    bool reduce_grad = true;  // insert REDUCE_GRAD per stage
    bool unshard = false;     // insert UNSHARD/RESHARD per stage (ZeRO-3)
    int prefetch = 1;         // UNSHARD this many compute actions before the stage's first use
};

namespace detail {

// Does compute action `a` (possibly an overlapped pair) run stage s, and does it
// accumulate weight gradients of s?
[[nodiscard]] constexpr bool uses_stage(const action& a, int s) {
    if (a.kind == action_kind::OVERLAP_F_B) return a.stage == s || a.overlap_stage == s;
    return is_compute(a.kind) && a.stage == s;
}
[[nodiscard]] constexpr bool makes_weight_grads(const action& a, int s) {
    if (a.kind == action_kind::OVERLAP_F_B) return a.overlap_stage == s && a.overlap_backward_kind == action_kind::B;
    return (a.kind == action_kind::B || a.kind == action_kind::W) && a.stage == s;
}

}  // namespace detail

// Returns `lowered` with the stage-wide actions inserted; weft::error if it is not a
// lowered program, or already has stage-wide actions.
[[nodiscard]] constexpr program add_shard_actions(const program& lowered, const shard_action_options& options = {}) {
    require(lowered.lowered, "add_shard_actions: program.lowered", "false",
            "pass the program lower() returned: REDUCE_GRAD goes after the comm actions are placed");
    require(options.prefetch >= 0, "add_shard_actions: prefetch", options.prefetch, "must be >= 0");
    program out = lowered;
    for (int r = 0; r < lowered.num_ranks; ++r) {
        const auto& in = lowered.ranks[static_cast<std::size_t>(r)];
        for (const action& a : in)
            if (!has_microbatch(a.kind))
                throw invalid_argument("add_shard_actions: action", to_string(a),
                                       "the program already has stage-wide actions; add them once");
        // before[i] / after[i]: stage-wide actions to put before / after in[i].
        std::vector<std::vector<action>> before(in.size()), after(in.size());
        std::vector<std::size_t> compute_positions;
        for (std::size_t i = 0; i < in.size(); ++i)
            if (is_compute(in[i].kind)) compute_positions.push_back(i);
        for (int s = 0; s < lowered.num_stages; ++s) {
            if (lowered.stage_rank[static_cast<std::size_t>(s)] != r) continue;
            std::size_t first_use = in.size(), last_use = 0, last_grads = in.size(), first_use_rank = 0;
            for (std::size_t k = 0; k < compute_positions.size(); ++k) {
                const std::size_t i = compute_positions[k];
                if (!detail::uses_stage(in[i], s)) continue;
                if (first_use == in.size()) {
                    first_use = i;
                    first_use_rank = k;
                }
                last_use = i;
                if (detail::makes_weight_grads(in[i], s)) last_grads = i;
            }
            if (first_use == in.size()) continue;  // a stage with no work here: nothing to shard
            if (options.unshard) {
                const std::size_t k = first_use_rank >= static_cast<std::size_t>(options.prefetch)
                                          ? first_use_rank - static_cast<std::size_t>(options.prefetch)
                                          : 0;
                // Ahead of the RECVs that feed that compute action too, so the all-gather
                // travels while the rank waits for its input.
                std::size_t at = compute_positions[k];
                while (at > 0 && (in[at - 1].kind == action_kind::RECV_F || in[at - 1].kind == action_kind::RECV_B))
                    --at;
                before[at].push_back({action_kind::UNSHARD, s, -1});
            }
            // After the SENDs of that compute action too: a neighbour waits for them.
            const auto past_sends = [&](std::size_t at) {
                while (at + 1 < in.size() &&
                       (in[at + 1].kind == action_kind::SEND_F || in[at + 1].kind == action_kind::SEND_B))
                    ++at;
                return at;
            };
            if (options.reduce_grad && last_grads != in.size())
                after[past_sends(last_grads)].push_back({action_kind::REDUCE_GRAD, s, -1});
            if (options.unshard) after[past_sends(last_use)].push_back({action_kind::RESHARD, s, -1});
        }
        std::vector<action> merged;
        merged.reserve(in.size() + 3 * static_cast<std::size_t>(lowered.num_stages));
        for (std::size_t i = 0; i < in.size(); ++i) {
            merged.insert(merged.end(), before[i].begin(), before[i].end());
            merged.push_back(in[i]);
            // REDUCE_GRAD before RESHARD when both follow the same action, so the gradients
            // start travelling before anything is freed.
            for (const auto kind : {action_kind::REDUCE_GRAD, action_kind::RESHARD})
                for (const action& a : after[i])
                    if (a.kind == kind) merged.push_back(a);
        }
        out.ranks[static_cast<std::size_t>(r)] = std::move(merged);
    }
    return out;
}

// Checks the stage-wide actions of a program: every stage has exactly one REDUCE_GRAD
// after all its weight-gradient actions, and (when `unshard`) exactly one UNSHARD before
// its first compute action and one RESHARD after its last. Empty message when they do.
[[nodiscard]] constexpr validation check_shard_actions(const program& p, const shard_action_options& options) {
    for (int s = 0; s < p.num_stages; ++s) {
        const int r = p.stage_rank[static_cast<std::size_t>(s)];
        const auto& actions = p.ranks[static_cast<std::size_t>(r)];
        int reduce_at = -1, unshard_at = -1, reshard_at = -1, reduces = 0, unshards = 0, reshards = 0;
        int first_use = -1, last_use = -1, last_grads = -1;
        for (std::size_t i = 0; i < actions.size(); ++i) {
            const action& a = actions[i];
            const int at = static_cast<int>(i);
            if (a.stage == s && a.kind == action_kind::REDUCE_GRAD) {
                reduce_at = at;
                ++reduces;
            }
            if (a.stage == s && a.kind == action_kind::UNSHARD) {
                unshard_at = at;
                ++unshards;
            }
            if (a.stage == s && a.kind == action_kind::RESHARD) {
                reshard_at = at;
                ++reshards;
            }
            if (detail::uses_stage(a, s)) {
                if (first_use < 0) first_use = at;
                last_use = at;
            }
            if (detail::makes_weight_grads(a, s)) last_grads = at;
        }
        const std::string stage = "stage " + detail::int_text(s) + " (rank " + detail::int_text(r) + ")";
        if (options.reduce_grad && (reduces != 1 || reduce_at < last_grads))
            return detail::failure(stage +
                                   " needs exactly one REDUCE_GRAD after its last weight-gradient action; it has " +
                                   detail::int_text(reduces) + (reduces == 1 ? ", too early" : ""));
        if (!options.unshard) continue;
        if (unshards != 1 || (first_use >= 0 && unshard_at > first_use))
            return detail::failure(stage + " needs exactly one UNSHARD before its first compute action; it has " +
                                   detail::int_text(unshards) + (unshards == 1 ? ", too late" : ""));
        if (reshards != 1 || reshard_at < last_use)
            return detail::failure(stage + " needs exactly one RESHARD after its last compute action; it has " +
                                   detail::int_text(reshards) + (reshards == 1 ? ", too early" : ""));
    }
    return {};
}

}  // namespace weft::sched
