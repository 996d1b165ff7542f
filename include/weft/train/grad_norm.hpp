// The global gradient norm of a step, exactly as one process would compute it, under any
// layout, and clipping by it (train_gpt --grad-clip, PyTorch's clip_grad_norm_). Every
// element of the model is counted by exactly one rank:
//   - data parallelism: replicas hold the same reduced gradients, so under plain
//     replication only replica 0 counts; under ZeRO each rank counts its own range, and the
//     ranges partition the stage;
//   - tensor parallelism: a sliced tensor is counted by every tensor-parallel rank (its
//     slice); a tensor each of them holds whole (LayerNorm, row-parallel biases) by rank 0;
//   - tied tensors (GPT-2's wte on the first and the last stage) hold the summed gradient
//     on every copy, and are counted on the lowest stage that holds them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "weft/core/parameter_registry.hpp"
#include "weft/models/pipeline_model.hpp"
#include "weft/nn/partition.hpp"
#include "weft/optim/gradient_summary.hpp"

namespace weft::train {

using optim::flat_run;
using optim::counted_sum_of_squares;

// The runs of stage `stage`'s flat buffer (its `registry` on tensor-parallel rank
// `tp_index`) that this rank counts in the global norm; adjacent runs are merged.
[[nodiscard]] inline std::vector<flat_run> norm_counted_runs(const weft::parameter_registry& registry, int stage,
                                                             int tp_index,
                                                             const std::vector<models::tied_parameter>& tied,
                                                             const std::vector<nn::unit_range>& units) {
    // The lowest stage holding each tied tensor counts it.
    const auto lowest_holder = [&](const models::tied_parameter& t) {
        for (std::size_t s = 0; s < units.size(); ++s)
            for (const int unit : t.units)
                if (unit >= units[s].first && unit < units[s].last) return static_cast<int>(s);
        return -1;
    };
    std::vector<flat_run> runs;
    for (const auto& info : registry.entries()) {
        if (info.split.whole() && tp_index != 0) continue;
        const auto tie = std::find_if(tied.begin(), tied.end(), [&](const auto& t) { return t.name == info.name; });
        if (tie != tied.end() && lowest_holder(*tie) != stage) continue;
        if (!runs.empty() && runs.back().last == info.offset)
            runs.back().last = info.offset + info.size;
        else
            runs.push_back({info.offset, info.offset + info.size});
    }
    return runs;
}

// What the gradients are multiplied by before the update: max_norm / (norm + 1e-6) when that
// is below 1, as PyTorch's clip_grad_norm_; 1 when clipping is off (max_norm = 0).
[[nodiscard]] inline double clip_coefficient(double max_norm, double norm) {
    if (max_norm <= 0) return 1.0;
    return std::min(1.0, max_norm / (norm + 1e-6));
}

}  // namespace weft::train
