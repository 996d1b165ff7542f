// Splitting a model's units into contiguous pipeline stages: as even as possible in unit
// count (earlier stages take the remainder, matching how the schedules number stages), or
// balanced by an estimated cost per unit when units cost different amounts (GPT-2's
// embedding and head against its blocks).
#pragma once

#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::nn {

// The units [first, last) one stage holds.
struct unit_range {
    int first = 0;
    int last = 0;
    [[nodiscard]] int size() const { return last - first; }
    friend bool operator==(const unit_range&, const unit_range&) = default;
};

[[nodiscard]] inline std::vector<unit_range> partition_units(int num_units, int stages) {
    require(num_units >= 1, "num_units", num_units, "must be at least 1");
    require(stages >= 1 && stages <= num_units, "stages", stages,
            "must be in [1, num_units = " + std::to_string(num_units) + "]");
    std::vector<unit_range> ranges;
    ranges.reserve(std::size_t(stages));
    const int base = num_units / stages;
    const int extra = num_units % stages;
    int first = 0;
    for (int s = 0; s < stages; ++s) {
        const int last = first + base + (s < extra ? 1 : 0);
        ranges.push_back({first, last});
        first = last;
    }
    return ranges;
}

// Contiguous stages whose largest total cost is as small as it can be (the linear
// partition problem, by dynamic programming: O(units^2 * stages), microseconds for any
// real model). Among equally good splits it takes the one partition_units would, or the
// nearest to it, so that equal costs give partition_units' answer exactly.
[[nodiscard]] inline std::vector<unit_range> partition_by_cost(std::span<const double> unit_costs, int stages) {
    const int n = static_cast<int>(unit_costs.size());
    require(n >= 1, "unit_costs.size()", n, "must be at least 1");
    require(stages >= 1 && stages <= n, "stages", stages, "must be in [1, num_units = " + std::to_string(n) + "]");
    for (const double c : unit_costs)
        require(c >= 0 && c < std::numeric_limits<double>::infinity(), "unit cost", c, "must be finite and >= 0");
    std::vector<double> prefix(std::size_t(n) + 1, 0.0);
    for (int i = 0; i < n; ++i) prefix[std::size_t(i) + 1] = prefix[std::size_t(i)] + unit_costs[std::size_t(i)];
    const auto cost = [&](int first, int last) { return prefix[std::size_t(last)] - prefix[std::size_t(first)]; };
    const auto even = partition_units(n, stages);
    // best[k][i]: the smallest largest-stage cost of units [0, i) in k stages; tie-break
    // by distance of the boundaries from the even split (sum of |boundary - even boundary|).
    constexpr double none = std::numeric_limits<double>::infinity();
    const auto at = [n](int k, int i) { return std::size_t(k) * std::size_t(n + 1) + std::size_t(i); };
    std::vector<double> best(std::size_t(stages + 1) * std::size_t(n + 1), none);
    std::vector<int> drift(best.size(), 0);
    std::vector<int> cut(best.size(), 0);
    best[at(0, 0)] = 0;
    // Relative slack for comparing costs, so rounding in the prefix sums cannot decide.
    const double slack = 1e-12 * std::max(prefix.back(), 1.0);
    for (int k = 1; k <= stages; ++k)
        for (int i = k; i <= n - (stages - k); ++i)
            for (int j = k - 1; j < i; ++j) {
                if (best[at(k - 1, j)] == none) continue;
                const double candidate = std::max(best[at(k - 1, j)], cost(j, i));
                const int moved = drift[at(k - 1, j)] + std::abs(i - even[std::size_t(k - 1)].last);
                const double current = best[at(k, i)];
                if (candidate < current - slack || (candidate <= current + slack && moved < drift[at(k, i)])) {
                    best[at(k, i)] = candidate;
                    drift[at(k, i)] = moved;
                    cut[at(k, i)] = j;
                }
            }
    std::vector<unit_range> ranges(static_cast<std::size_t>(stages));
    int last = n;
    for (int k = stages; k >= 1; --k) {
        const int first = cut[at(k, last)];
        ranges[std::size_t(k - 1)] = {first, last};
        last = first;
    }
    return ranges;
}

// Stage unit ranges from a list of unit counts per stage (engine_options::partition);
// weft::error unless there is one positive count per stage and they add up to the model's units.
[[nodiscard]] inline std::vector<unit_range> partition_from_counts(const std::vector<int>& counts, int num_units,
                                                                   int num_stages) {
    require(static_cast<int>(counts.size()) == num_stages, "partition size", counts.size(),
            "must list one unit count per stage (" + std::to_string(num_stages) + " stages)");
    std::vector<unit_range> ranges;
    int first = 0;
    for (const int count : counts) {
        require(count >= 1, "partition entry", count, "every stage needs at least one unit");
        ranges.push_back({first, first + count});
        first += count;
    }
    require(first == num_units, "partition total", first,
            "the counts must add up to the model's " + std::to_string(num_units) + " units (layers + 2)");
    return ranges;
}

}  // namespace weft::nn
