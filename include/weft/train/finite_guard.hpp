// The non-finite guard: a step whose loss or reduced gradients hold a NaN or an infinity
// is not applied (the optimizer state and the weights stay as they were), and the step log
// names where it showed first. A trainer then stops (train_gpt exits 3) or skips a few such
// steps, as mixed-precision trainers do; it never writes a checkpoint from poisoned weights.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

#include "weft/optim/gradient_summary.hpp"

namespace weft::train {

using optim::all_finite;

// Where a non-finite step appeared first. `stage_flags[s]` > 0 when stage s's reduced
// gradients are not all finite. Backward runs from the loss down to stage 0, so a
// non-finite gradient first appears in the highest such stage; a non-finite loss with
// finite gradients (a loss that overflowed in the last reduction) names the last stage.
// -1 when the step is finite.
[[nodiscard]] inline int first_nonfinite_stage(std::span<const double> stage_flags, bool loss_finite) {
    for (std::size_t s = stage_flags.size(); s-- > 0;)
        if (stage_flags[s] > 0) return static_cast<int>(s);
    return loss_finite ? -1 : static_cast<int>(stage_flags.size()) - 1;
}

}  // namespace weft::train
