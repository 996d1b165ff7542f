// GPipe: every rank runs all forwards, then all backwards (increasing micro-batch order).
// One stage per rank, stage s on rank s; the program is compute-only (see lower()).
#pragma once

#include <string_view>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct gpipe {
    static constexpr schedule_kind::description description{
        .name = "gpipe", .chunks = detail::one_stage_per_rank};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        return generate(params.ranks, params.microbatches);
    }

    [[nodiscard]] static constexpr program generate(int ranks, int microbatches) {
        detail::require_generator_arguments(ranks, microbatches);
        program p;
        p.num_ranks = ranks;
        p.num_stages = ranks;
        p.num_microbatches = microbatches;
        p.stage_rank.resize(static_cast<std::size_t>(ranks));
        p.ranks.resize(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) {
            p.stage_rank[static_cast<std::size_t>(r)] = r;
            auto& actions = p.ranks[static_cast<std::size_t>(r)];
            actions.reserve(2 * static_cast<std::size_t>(microbatches));
            for (int mb = 0; mb < microbatches; ++mb) actions.push_back({action_kind::F, r, mb});
            for (int mb = 0; mb < microbatches; ++mb) actions.push_back({action_kind::B, r, mb});
        }
        return p;
    }
};

}  // namespace weft::sched
