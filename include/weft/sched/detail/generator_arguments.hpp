// Argument checks shared by the schedule generators, so every generator rejects
// bad sizes with the same messages instead of allocating absurd programs.
#pragma once

#include <string>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"

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

}  // namespace weft::sched::detail
