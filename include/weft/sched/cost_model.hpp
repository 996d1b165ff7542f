// Per-action costs for the timed simulation and for zb-auto's search: T_F, T_B
// (backward for inputs), T_W (backward for weights) and a communication latency.
// Costs are given per pipeline rank's whole share of the model (the paper's "stage");
// with v chunks per rank, each chunk costs 1/v of it. A full backward B costs T_B + T_W.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::sched {

struct rank_stage_cost {
    double forward = 1;          // T_F
    double backward_input = 1;   // T_B
    double backward_weight = 1;  // T_W
    friend constexpr bool operator==(const rank_stage_cost&, const rank_stage_cost&) = default;
};

struct cost_model {
    rank_stage_cost uniform{};           // used for every rank not listed in per_rank
    std::vector<rank_stage_cost> per_rank;  // optional: one entry per pipeline rank
    double comm = 0;                     // T_comm: latency from a SEND to its RECV completing

    // The cost of pipeline rank `rank`'s whole share.
    [[nodiscard]] constexpr rank_stage_cost of_rank(int rank) const {
        if (per_rank.empty()) return uniform;
        if (rank < 0 || static_cast<std::size_t>(rank) >= per_rank.size())
            throw invalid_argument("cost_model rank", rank,
                                   "per_rank lists " + std::to_string(per_rank.size()) + " ranks");
        return per_rank[static_cast<std::size_t>(rank)];
    }

    constexpr void validate(int ranks) const {
        const auto check = [](const rank_stage_cost& c) {
            require(c.forward > 0, "T_F", c.forward, "must be > 0");
            require(c.backward_input > 0, "T_B", c.backward_input, "must be > 0");
            require(c.backward_weight > 0, "T_W", c.backward_weight, "must be > 0");
        };
        check(uniform);
        for (const auto& c : per_rank) check(c);
        // The message is built only on failure: std::to_string is not constexpr.
        if (!per_rank.empty() && static_cast<long long>(per_rank.size()) != ranks)
            throw invalid_argument("cost_model per_rank size", per_rank.size(),
                                   "must be empty or list every pipeline rank (" + std::to_string(ranks) + ")");
        require(comm >= 0, "T_comm", comm, "must be >= 0");
    }

    friend constexpr bool operator==(const cost_model&, const cost_model&) = default;
};

}  // namespace weft::sched
