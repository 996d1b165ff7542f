// Lowering: turns a compute-only program into one the engine can run by inserting the
// SEND/RECV actions between stages that live on different ranks.
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
        const auto& in = compute_only.ranks[static_cast<std::size_t>(r)];
        std::vector<action> lowered;
        lowered.reserve(in.size() * 3);
        for (const action& a : in) {
            const int s = a.stage;
            const int mb = a.microbatch;
            const bool prev_remote = s > 0 && rank_of(s - 1) != r;
            const bool next_remote = s < last && rank_of(s + 1) != r;
            if (a.kind == F) {
                if (prev_remote) lowered.push_back({RECV_F, s, mb});
                lowered.push_back(a);
                if (next_remote) lowered.push_back({SEND_F, s, mb});
            } else if (a.kind == B || a.kind == I) {
                if (next_remote) lowered.push_back({RECV_B, s, mb});
                lowered.push_back(a);
                if (prev_remote) lowered.push_back({SEND_B, s, mb});
            } else {
                lowered.push_back(a);
            }
        }
        out.ranks[static_cast<std::size_t>(r)] = std::move(lowered);
    }
    return out;
}

}  // namespace weft::sched
