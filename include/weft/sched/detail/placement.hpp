// The stage placements the generators use, as empty programs and as the chunk rules their
// descriptions declare: one stage per rank, looped (stage s on rank s % p, as Megatron's
// interleaving), and V-shaped (stage s on rank s for s < p, else 2p - 1 - s, as ZB-V and DualPipeV).
#pragma once

#include <cstddef>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched::detail {

// The chunks per rank each placement holds, for the schedules' descriptions: the placement,
// not the order of actions, is what fixes them.
inline constexpr chunk_rule one_stage_per_rank{
    .min = 1, .max = 1, .default_count = 1, .why = "runs one stage per rank"};
// Any v >= 1; 2 by default, since v = 1 is plain 1F1B or GPipe.
inline constexpr chunk_rule looped_chunks{
    .min = 1, .max = 0, .default_count = 2, .why = "runs any number of stages per rank, looped"};
inline constexpr chunk_rule v_shaped_chunks{
    .min = 2, .max = 2, .default_count = 2, .why = "places two stages per rank in a V"};

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

}  // namespace weft::sched::detail
