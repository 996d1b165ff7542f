// The learning-rate schedule of llm.c and Megatron: linear warmup from lr/warmup to lr over
// `warmup_steps`, then a cosine decay to `min_lr` at `decay_steps`, and min_lr after it.
// A function of the global step alone, so that a run resumed at step k continues with the
// learning rates of the run that did not stop (given the same decay_steps).
#pragma once

#include <cmath>
#include <numbers>
#include <string>

#include "weft/core/error.hpp"

namespace weft::train {

struct lr_schedule {
    double lr = 3e-4;       // the peak, reached at the end of the warmup
    double min_lr = 3e-4;   // after the decay; equal to lr: no decay
    long long warmup_steps = 0;
    long long decay_steps = 0;  // the step the cosine reaches min_lr; <= warmup_steps: no decay

    void validate() const {
        require(std::isfinite(lr) && lr > 0, "lr", lr, "must be finite and positive");
        require(std::isfinite(min_lr) && min_lr > 0 && min_lr <= lr, "min_lr", min_lr,
                "must be finite, positive and at most lr = " + std::to_string(lr));
        require(warmup_steps >= 0, "warmup_steps", warmup_steps, "must be >= 0");
        // A min_lr below lr asks for a decay; one that ends before the warmup does would never
        // run, and min_lr would be ignored without a word.
        require(min_lr == lr || decay_steps > warmup_steps, "decay_steps", decay_steps,
                "must be above warmup_steps = " + std::to_string(warmup_steps) + " for the decay to min_lr = " +
                    std::to_string(min_lr) + " (below lr = " + std::to_string(lr) + ")");
    }

    [[nodiscard]] double at(long long step) const {
        if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
        if (step >= decay_steps || decay_steps <= warmup_steps) return decay_steps > warmup_steps ? min_lr : lr;
        const double progress =
            static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
        return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (lr - min_lr);
    }
};

}  // namespace weft::train
