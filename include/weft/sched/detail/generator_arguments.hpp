// Argument checks shared by the schedule generators, so every generator rejects
// bad sizes with the same messages instead of allocating absurd programs.
#pragma once

#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched::detail {

// Far above any real pipeline, low enough that a typo cannot exhaust memory.
inline constexpr long long max_rank_microbatch_product = 1LL << 24;

constexpr void require_generator_arguments(int ranks, int microbatches) {
    if (ranks < 1) throw invalid_argument("ranks", ranks, "must be >= 1");
    if (microbatches < 1) throw invalid_argument("microbatches", microbatches, "must be >= 1");
    if (static_cast<long long>(ranks) * microbatches > max_rank_microbatch_product)
        throw invalid_argument("microbatches", microbatches,
                               "ranks * microbatches must be <= " +
                                   int_text(max_rank_microbatch_product) + " (ranks = " +
                                   int_text(ranks) + ")");
}

// ranks, microbatches and chunks in range, and ranks * chunks * microbatches small enough.
constexpr void require_generator_arguments(const schedule_params& params) {
    require_generator_arguments(params.ranks, params.microbatches);
    if (params.chunks < 1) throw invalid_argument("chunks", params.chunks, "must be >= 1");
    if (static_cast<long long>(params.ranks) * params.microbatches * params.chunks >
        max_rank_microbatch_product)
        throw invalid_argument("chunks", params.chunks,
                               "ranks * chunks * microbatches must be <= " +
                                   int_text(max_rank_microbatch_product) + " (ranks = " +
                                   int_text(params.ranks) + ", microbatches = " +
                                   int_text(params.microbatches) + ")");
}

// For schedules whose stage placement fixes the chunks per rank (1, or 2 for the V shapes).
constexpr void require_chunks(const schedule_params& params, std::string_view schedule, int chunks) {
    if (params.chunks != chunks)
        throw invalid_argument("chunks", params.chunks,
                               "schedule " + std::string(schedule) + " runs " + int_text(chunks) +
                                   (chunks == 1 ? " stage" : " stages") + " per rank; valid: " +
                                   int_text(chunks));
}

}  // namespace weft::sched::detail
