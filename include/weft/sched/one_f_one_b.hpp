// Non-interleaved 1F1B (PyTorch Schedule1F1B / Megatron-LM): rank r runs p - r - 1 warm-up
// forwards, then forward/backward pairs, then the remaining backwards, which caps live
// activations at p - r micro-batches. One stage per rank, full B (no I/W split).
#pragma once

#include <string_view>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct one_f_one_b {
    static constexpr schedule_kind::description description{
        .name = "1f1b", .chunks = detail::one_stage_per_rank, .min_microbatches_per_rank = 1};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        return generate(params.ranks, params.microbatches);
    }

    [[nodiscard]] static constexpr program generate(int ranks, int microbatches) {
        detail::require_generator_arguments(ranks, microbatches);
        // With fewer micro-batches than stages the warm-up cannot fill the pipeline;
        // PyTorch rejects that case too.
        if (microbatches < description.min_microbatches_per_rank * ranks)
            throw invalid_argument("microbatches", microbatches,
                                   "1F1B needs microbatches >= the number of pipeline stages (" +
                                       detail::int_text(ranks) + ")");
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
            const int warmup = ranks - r - 1;
            int next_f = 0;
            int next_b = 0;
            while (next_f < warmup) actions.push_back({action_kind::F, r, next_f++});
            while (next_f < microbatches) {
                actions.push_back({action_kind::F, r, next_f++});
                actions.push_back({action_kind::B, r, next_b++});
            }
            while (next_b < microbatches) actions.push_back({action_kind::B, r, next_b++});
        }
        return p;
    }
};

}  // namespace weft::sched
