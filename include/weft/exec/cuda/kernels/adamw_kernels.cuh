// AdamW's kernels (adamw.cuh launches them) and the state they keep in device memory: the
// step counter and the per-step scalars, advanced by a kernel so that one captured CUDA graph
// replays correct steps. They compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block, without a
// GPU.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/kernels/optimizer_step_kernels.cuh"

namespace weft::exec::cuda_detail {

// Hyperparameters and derived per-step scalars, kept in device memory. Set the
// hyperparameters with adamw_state_init (or write lr between steps); adamw_begin_step
// advances `step` and recomputes the scalars on the device.
struct adamw_state {
    std::uint64_t step;
    double lr, beta1, beta2, eps, weight_decay;
    adamw_step_factors factors;  // of step `step` (grad_scale 1)
};

namespace detail {

WEFT_BEGIN_INLINE_KERNELS

__global__ inline void adamw_begin_step_kernel(adamw_state* s) {
    const std::uint64_t t = s->step + 1;
    s->step = t;
    // As PyTorch (and adamw_factors::of_step on the host): formed in double, rounded once.
    s->factors = {.decay = float(1.0 - s->lr * s->weight_decay),
                  .beta1 = float(s->beta1),
                  .one_minus_beta1 = float(1.0 - s->beta1),
                  .beta2 = float(s->beta2),
                  .one_minus_beta2 = float(1.0 - s->beta2),
                  .step_size = float(s->lr / (1.0 - pow(s->beta1, double(t)))),
                  .bias_correction2_sqrt = float(sqrt(1.0 - pow(s->beta2, double(t)))),
                  .eps = float(s->eps),
                  .lerp_from_start = s->beta1 > 0.5,  // torch.lerp's two forms
                  .grad_scale = 1.0f};
}

// Hyperparameters arrive as kernel arguments, so a captured graph replays the values
// it was captured with (no host memory is read at replay time).
__global__ inline void adamw_set_hyperparameters_kernel(adamw_state* s, double lr, double beta1, double beta2,
                                                        double eps, double weight_decay) {
    s->lr = lr;
    s->beta1 = beta1;
    s->beta2 = beta2;
    s->eps = eps;
    s->weight_decay = weight_decay;
}

__global__ inline void adamw_update_kernel(float* params, const float* grads, float* m, float* v, bf16* params_bf16,
                                           std::size_t n, bool decays, const adamw_state* state) {
    const adamw_step_factors f = state->factors;
    adamw_grid_stride(params, grads, m, v, params_bf16, n, f, decays);
}

WEFT_END_INLINE_KERNELS

}  // namespace detail

}  // namespace weft::exec::cuda_detail
