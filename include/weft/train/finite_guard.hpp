// The non-finite guard: a step whose loss or reduced gradients hold a NaN or an infinity
// is not applied (the optimizer state and the weights stay as they were), and the step log
// names where it showed first. A trainer then stops (train_gpt exits 3) or skips a few such
// steps, as mixed-precision trainers do; it never writes a checkpoint from poisoned weights.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

namespace weft::train {

template <class Scalar>
[[nodiscard]] bool all_finite(std::span<const Scalar> values) {
    // One branch-free pass: v * 0 is 0 for a finite v and NaN for a NaN or an infinity, and
    // a NaN survives the sum.
    Scalar sum{0};
    for (const Scalar v : values) sum += v * Scalar(0);
    return std::isfinite(sum);
}

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
