// AdamW's hyperparameters and the scalar factors of one step, formed once per step as
// PyTorch forms them: what optim::adamw's host update (optim/adamw_update.hpp) and a compute
// backend's optimizer kernel (exec/compute_backend.hpp) both take. No Eigen here, so that a
// backend's headers can name them.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>

#include "weft/core/error.hpp"

namespace weft::optim {

struct adamw_options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;

    void validate() const {
        require(std::isfinite(lr) && lr > 0, "adamw lr", lr, "must be finite and positive");
        require(beta1 >= 0 && beta1 < 1, "adamw beta1", beta1, "must be in [0, 1)");
        require(beta2 >= 0 && beta2 < 1, "adamw beta2", beta2, "must be in [0, 1)");
        require(eps > 0, "adamw eps", eps, "must be positive");
        require(std::isfinite(weight_decay) && weight_decay >= 0, "adamw weight_decay", weight_decay,
                "must be finite and non-negative");
    }
};

// The scalars of step t (1, 2, ...): as PyTorch, formed in double and rounded once to the
// tensors' type. grad_scale multiplies every gradient first (gradient clipping; 1: none).
template <std::floating_point Scalar>
struct adamw_factors {
    Scalar decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
    bool lerp_from_start;  // torch.lerp's two forms: from the start when beta1 > 0.5
    Scalar grad_scale;

    [[nodiscard]] static adamw_factors of_step(const adamw_options& o, std::uint64_t t, Scalar grad_scale) {
        return {.decay = Scalar(1.0 - o.lr * o.weight_decay),
                .beta1 = Scalar(o.beta1),
                .one_minus_beta1 = Scalar(1.0 - o.beta1),
                .beta2 = Scalar(o.beta2),
                .one_minus_beta2 = Scalar(1.0 - o.beta2),
                .step_size = Scalar(o.lr / (1.0 - std::pow(o.beta1, double(t)))),
                .bias_correction2_sqrt = Scalar(std::sqrt(1.0 - std::pow(o.beta2, double(t)))),
                .eps = Scalar(o.eps),
                .lerp_from_start = o.beta1 > 0.5,
                .grad_scale = grad_scale};
    }
};

}  // namespace weft::optim
