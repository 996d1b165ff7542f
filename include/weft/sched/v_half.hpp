// V-Half (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024, arXiv
// 2405.15362): ZB-V's placement (rank r holds stages r and 2p-1-r) and split backward, with a
// building block whose lifespan holds about half of 1F1B's activations: at most
// floor((p+2)/2) whole-rank micro-batches per rank, against 1F1B's p.
#pragma once

#include <string_view>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/detail/v_building_block.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct v_half {
    static constexpr schedule_kind::description description{
        .name = "v-half", .chunks = detail::v_shaped_chunks};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // The paper's (and its authors' code's) block for rank r of p: forwards 2 slots apart
    // going down and 1 apart coming back; input gradients 2 apart going down, 1 coming back
    // up. A rank's chunk-0 activation lives about 6p - 3r slots and its chunk-1 one about 3r,
    // together about 6p slots: p chunk micro-batches, i.e. p/2 whole ones, at a 6-slot period.
    // For even p the backward half starts 3 slots later, or the block would collide with its
    // own repetition 6 slots on.
    [[nodiscard]] static constexpr detail::v_block_slots block(int p, int r) {
        const int gap = p % 2 == 0 ? 3 : 0;
        return {.forward_down = 2 * r,
                .forward_up = 3 * p - r - 2,
                .input_grad_up = 3 * p + gap + 2 * r - 1,
                .input_grad_down = 6 * p + gap - r - 2};
    }

    // Most activations any rank holds, in whole-rank micro-batches (a chunk's counts 1/2),
    // for m >= p/2 or so; fewer micro-batches hold fewer.
    [[nodiscard]] static constexpr int peak_bound(int ranks) { return (ranks + 2) / 2; }

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        return detail::v_block_program(params.ranks, params.microbatches, block);
    }
};

}  // namespace weft::sched
