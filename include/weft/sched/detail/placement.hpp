// Empty programs with the stage placements the generators use: one stage per rank,
// looped (stage s on rank s % p, as Megatron's interleaving), and V-shaped (stage s on
// rank s for s < p, else 2p - 1 - s, as ZB-V and DualPipeV).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched::detail {

// A compute-only program of ranks * chunks stages with no actions; stage s on rank s % ranks.
[[nodiscard]] constexpr program looped_program(int ranks, int chunks, int microbatches) {
    program p;
    p.num_ranks = ranks;
    p.num_stages = ranks * chunks;
    p.num_microbatches = microbatches;
    p.stage_rank.resize(static_cast<std::size_t>(p.num_stages));
    for (int s = 0; s < p.num_stages; ++s) p.stage_rank[static_cast<std::size_t>(s)] = s % ranks;
    p.ranks.resize(static_cast<std::size_t>(ranks));
    return p;
}

// A compute-only program of 2 * ranks stages with no actions, placed in a V.
[[nodiscard]] constexpr program v_program(int ranks, int microbatches) {
    program p = looped_program(ranks, 2, microbatches);
    for (int s = ranks; s < 2 * ranks; ++s)
        p.stage_rank[static_cast<std::size_t>(s)] = 2 * ranks - 1 - s;
    return p;
}

// The V placement holds exactly two chunks per rank; `schedule` names the generator asking.
constexpr void require_v_chunks(int chunks, std::string_view schedule) {
    if (chunks != 2)
        throw invalid_argument("chunks", chunks,
                               std::string(schedule) +
                                   " needs exactly 2 chunks per rank (V placement: stage s on rank s for s < ranks, "
                                   "else on rank 2 * ranks - 1 - s)");
}

}  // namespace weft::sched::detail
