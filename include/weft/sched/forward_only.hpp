// The forwards of a schedule, for evaluation (a validation loss), as a lowered program:
// each rank keeps its F actions, and the forward half of each overlapped pair, in the
// schedule's order, with a RECV_F before each forward whose input comes from another rank
// and a SEND_F after each whose output goes to one. The communication and sharding actions
// of a lowered input are dropped first. That order is deadlock-free because the
// schedule's is: dropping the backwards removes dependencies and adds none. It has no
// backward, so sched::check and lower() (which want one per forward) do not apply; add
// UNSHARD/RESHARD with add_shard_actions.
#pragma once

#include <utility>
#include <vector>

#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched {

[[nodiscard]] constexpr program forward_only(const program& schedule) {
    program out = schedule;
    out.lowered = true;
    const int last = schedule.num_stages - 1;
    const auto rank_of = [&](int stage) { return schedule.stage_rank[static_cast<std::size_t>(stage)]; };
    for (int r = 0; r < schedule.num_ranks; ++r) {
        std::vector<action> forwards;
        for (const action& a : schedule.ranks[static_cast<std::size_t>(r)]) {
            if (a.kind != action_kind::F && a.kind != action_kind::OVERLAP_F_B) continue;
            const action f = a.kind == action_kind::F ? a : forward_part(a);
            if (f.stage > 0 && rank_of(f.stage - 1) != r)
                forwards.push_back({action_kind::RECV_F, f.stage, f.microbatch});
            forwards.push_back(f);
            if (f.stage < last && rank_of(f.stage + 1) != r)
                forwards.push_back({action_kind::SEND_F, f.stage, f.microbatch});
        }
        out.ranks[static_cast<std::size_t>(r)] = std::move(forwards);
    }
    return out;
}

}  // namespace weft::sched
