// V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024, arXiv
// 2405.15362): ZB-V's placement (rank r holds stages r and 2p-1-r) and split backward, with
// the tightest V building block: about a third of 1F1B's activations, at most
// floor((p+4)/3) whole-rank micro-batches per rank, for a bubble somewhat larger than V-Half's.
#pragma once

#include <string_view>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/detail/v_building_block.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct v_min {
    static constexpr schedule_kind::description description{
        .name = "v-min", .chunks = detail::v_shaped_chunks};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // The paper's (and its authors' code's) block for rank r of p: every pass 1 slot after
    // its neighbour's, so a rank's chunk-0 activation lives about 4p - 2r slots and its
    // chunk-1 one about 2r, together 4p slots: 2p/3 chunk micro-batches, p/3 whole ones, at a
    // 6-slot period. When 3 divides p the backward half starts 2 slots later, or the block
    // would collide with its own repetition.
    [[nodiscard]] static constexpr detail::v_block_slots block(int p, int r) {
        const int gap = p % 3 == 0 ? 2 : 0;
        return {.forward_down = r,
                .forward_up = 2 * p - r - 1,
                .input_grad_up = 2 * p + gap + r,
                .input_grad_down = 4 * p + gap - r - 1};
    }

    // Most activations any rank holds, in whole-rank micro-batches (a chunk's counts 1/2).
    [[nodiscard]] static constexpr int peak_bound(int ranks) { return (ranks + 4) / 3; }

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        return detail::v_block_program(params.ranks, params.microbatches, block);
    }
};

}  // namespace weft::sched
