// A pipeline program: per rank, the ordered actions it executes, plus the stage -> rank map.
// Generators build compute-only programs; lower() adds the SEND/RECV actions.
#pragma once

#include <string>
#include <vector>

#include "weft/sched/action.hpp"

namespace weft::sched {

struct program {
    int num_ranks = 0;
    int num_stages = 0;
    int num_microbatches = 0;
    std::vector<int> stage_rank;             // stage -> rank that runs it
    std::vector<std::vector<action>> ranks;  // per rank, in execution order
    bool lowered = false;                    // true once lower() inserted SEND/RECV
    friend constexpr bool operator==(const program&, const program&) = default;
};

// One line per rank, "rank 0: 0F0 0F1 ...", each ending in '\n'.
[[nodiscard]] constexpr std::string to_text(const program& p) {
    std::string text;
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        text.append("rank ").append(detail::int_text(static_cast<long long>(r))).append(":");
        for (const action& a : p.ranks[r]) text.append(" ").append(to_string(a));
        text.append("\n");
    }
    return text;
}

}  // namespace weft::sched
