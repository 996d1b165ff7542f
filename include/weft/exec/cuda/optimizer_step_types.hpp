// The plain types the optimizer kernels (kernels/optimizer_step.cuh) take, apart from the
// kernels so that host code (exec/cuda.hpp) can fill them without nvcc.
#pragma once

#include <cstddef>

namespace weft::cuda {

// One step's scalars (optim::adamw_factors<float>, without the host's headers).
struct adamw_step_factors {
    float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
    int lerp_from_start;  // torch.lerp's two forms
    float grad_scale;     // every gradient times this first (clipping); 1: none
};

// A piece [first, last) of the owned gradients (relative to their first element), counted in
// the norm or not. A summary's pieces cover the owned gradients in order.
struct gradient_segment {
    std::size_t first;
    std::size_t last;
    int counted;
};

}  // namespace weft::cuda
