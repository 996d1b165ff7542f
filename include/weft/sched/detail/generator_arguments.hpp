// Argument checks shared by the schedule generators, so every generator rejects
// bad sizes with the same messages instead of allocating absurd programs.
#pragma once

#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
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

// The chunks per rank the schedule's description allows (its stage placement fixes them),
// worded for a generator's caller: "zbv needs exactly 2 chunks per rank: it places two
// stages per rank in a V; valid: 2" (parallel_config says "schedule zbv places ...").
constexpr void require_chunks(const schedule_params& params, const schedule_kind::description& schedule) {
    const chunk_rule& rule = schedule.chunks;
    if (!rule.allows(params.chunks))
        throw invalid_argument("chunks", params.chunks,
                               std::string(schedule.name) + " needs " +
                                   (rule.max == rule.min ? "exactly " : "") + rule.valid_text() +
                                   (rule.max == 1 ? " chunk" : " chunks") + " per rank: it " +
                                   std::string(rule.why) + "; valid: " + rule.valid_text());
}

}  // namespace weft::sched::detail
