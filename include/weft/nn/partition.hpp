// Splitting a model's units into contiguous pipeline stages.
// Earlier stages take the remainder, matching how the schedules number stages.
#pragma once

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

}  // namespace weft::nn
