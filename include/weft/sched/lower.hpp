// Lowering: turns a compute-only program into one the engine can run by inserting the
// SEND/RECV actions between neighbour stages that live on different ranks (any placement:
// one stage per rank, looped/interleaved, V-shaped).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/validate.hpp"

namespace weft::sched {

// Each SEND goes right after the action producing its data and each RECV right before the
// action consuming it, so the lowered program deadlocks exactly when the input does.
[[nodiscard]] constexpr program lower(const program& compute_only) {
    if (compute_only.lowered)
        throw error("lower: the program is already lowered (lowered = true); pass the "
                    "compute-only program that the generator returned");
    // Lowering a broken program would hide the defect behind comm actions.
    if (validation v = check(compute_only); !v.ok)
        throw error("lower: the program is invalid: " + v.message);

    using enum action_kind;
    program out = compute_only;
    out.lowered = true;
    const auto rank_of = [&](int stage) {
        return compute_only.stage_rank[static_cast<std::size_t>(stage)];
    };
    const int last = compute_only.num_stages - 1;
    for (int r = 0; r < compute_only.num_ranks; ++r) {
        // Neighbour stages on the same rank (interleaved and V placements) hand data over
        // in memory, without a SEND/RECV.
        const auto prev_remote = [&](int s) { return s > 0 && rank_of(s - 1) != r; };
        const auto next_remote = [&](int s) { return s < last && rank_of(s + 1) != r; };
        const auto& in = compute_only.ranks[static_cast<std::size_t>(r)];
        std::vector<action> lowered;
        lowered.reserve(in.size() * 3);
        // Both parts of an OVERLAP_F_B run as one step: every RECV either part needs comes
        // before it, every SEND either part produces after it.
        for (const action& a : in) {
            const bool overlap = a.kind == OVERLAP_F_B;
            const action forward = overlap ? forward_part(a) : a;
            const action backward = overlap ? backward_part(a) : a;
            const bool has_forward = overlap || a.kind == F;
            const bool has_backward = overlap || a.kind == B || a.kind == I;
            if (!has_forward && !has_backward) {
                lowered.push_back(a);
                continue;
            }
            if (has_forward && prev_remote(forward.stage))
                lowered.push_back({RECV_F, forward.stage, forward.microbatch});
            if (has_backward && next_remote(backward.stage))
                lowered.push_back({RECV_B, backward.stage, backward.microbatch});
            lowered.push_back(a);
            if (has_forward && next_remote(forward.stage))
                lowered.push_back({SEND_F, forward.stage, forward.microbatch});
            if (has_backward && prev_remote(backward.stage))
                lowered.push_back({SEND_B, backward.stage, backward.microbatch});
        }
        out.ranks[static_cast<std::size_t>(r)] = std::move(lowered);
    }
    return out;
}

}  // namespace weft::sched
