// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, handcrafted schedule 1):
// 1F1B's order with the backward split into I (input gradient) and W (weight gradient);
// rank r postpones the W of its first r micro-batches to the end, where they fill the
// cool-down bubble. Bubble (p-1)(T_F+T_B-T_W) instead of 1F1B's (p-1)(T_F+T_B+T_W), same peak p.
#pragma once

#include <cstddef>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct zb_h1 {
    static constexpr schedule_kind::description description{
        .name = "zb-h1", .chunks = detail::one_stage_per_rank};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        const int p = params.ranks;
        const int m = params.microbatches;
        if (m < p)
            throw invalid_argument("microbatches", m,
                                   "zb-h1 needs microbatches >= ranks (" + detail::int_text(p) +
                                       ") to fill its 1F1B warm-up");
        program out = detail::looped_program(p, 1, m);
        for (int r = 0; r < p; ++r) {
            auto& actions = out.ranks[static_cast<std::size_t>(r)];
            actions.reserve(3 * static_cast<std::size_t>(m));
            // p - r forwards, then backward/forward pairs, then the remaining backwards:
            // 1F1B's order. A deferred W keeps its activations live, but only for
            // micro-batches that 1F1B would still hold on rank 0, so the peak stays p.
            const int deferred = r;
            int next_f = 0;
            for (; next_f < p - r; ++next_f) actions.push_back({action_kind::F, r, next_f});
            for (int b = 0; b < m; ++b) {
                actions.push_back({action_kind::I, r, b});
                if (b >= deferred) actions.push_back({action_kind::W, r, b});
                if (next_f < m) actions.push_back({action_kind::F, r, next_f++});
            }
            for (int b = 0; b < deferred; ++b) actions.push_back({action_kind::W, r, b});
        }
        return out;
    }
};

}  // namespace weft::sched
