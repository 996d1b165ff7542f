// AdamW on the GPU with torch.optim.AdamW's update (as weft::optim::adamw): fp32 master
// weights, gradients and moments, plus an optional bf16 copy of the weights for compute.
// The step counter and the per-step scalars live in device memory and are advanced by a
// kernel, so one captured CUDA graph replays correct steps 1, 2, 3, ...
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/adamw_kernels.cuh"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/gpu/runtime.hpp"
#include "weft/optim/adamw_factors.hpp"

namespace weft::exec::cuda_detail {

// The hyperparameters: optim::adamw_options (torch.optim.AdamW's defaults), whose header has
// no Eigen, so nvcc compiles it here.
using adamw_hyperparameters = optim::adamw_options;

// Which part of the flat buffers decays (weft decays 2-D+ tensors only): a range
// [offset, offset + size) and its flag. The optimizer layer builds these from the registry.
struct adamw_range {
    std::size_t offset;
    std::size_t size;
    bool decays;
};

namespace detail {

inline void require_adamw_hyperparameters(double lr, double beta1, double beta2, double eps, double weight_decay) {
    require(lr > 0, "adamw lr", lr, "must be positive");
    require(beta1 >= 0 && beta1 < 1, "adamw beta1", beta1, "must be in [0, 1)");
    require(beta2 >= 0 && beta2 < 1, "adamw beta2", beta2, "must be in [0, 1)");
    require(eps > 0, "adamw eps", eps, "must be positive");
    require(weight_decay >= 0, "adamw weight_decay", weight_decay, "must be non-negative");
}

}  // namespace detail

// Synchronous: writes a state with these hyperparameters to `state`, at `step` steps
// taken (0: fresh; a checkpoint's count to resume, which drives bias correction).
inline void adamw_state_init(adamw_state* state, double lr, double beta1, double beta2, double eps,
                             double weight_decay, std::uint64_t step = 0) {
    detail::require_adamw_hyperparameters(lr, beta1, beta2, eps, weight_decay);
    adamw_state host{};
    host.step = step;
    host.lr = lr;
    host.beta1 = beta1;
    host.beta2 = beta2;
    host.eps = eps;
    host.weight_decay = weight_decay;
    gpu::check(cudaMemcpy(state, &host, sizeof(host), cudaMemcpyHostToDevice), "cudaMemcpy adamw_state");
    // A pageable-source cudaMemcpy may return before its DMA lands (it is ordered only on
    // the default stream); a step enqueued next on a non-blocking stream must see the state.
    gpu::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize after cudaMemcpy adamw_state");
}

// Stream-ordered (capturable): replaces the hyperparameters, keeping the step counter, for
// the next adamw_begin_step. A captured graph replays the values passed at capture.
inline void adamw_set_hyperparameters(adamw_state* state, double lr, double beta1, double beta2, double eps,
                                      double weight_decay, cudaStream_t stream) {
    detail::require_adamw_hyperparameters(lr, beta1, beta2, eps, weight_decay);
    require(state != nullptr, "adamw_set_hyperparameters: state", "a null pointer", "must be a device pointer");
    detail::adamw_set_hyperparameters_kernel<<<1, 1, 0, stream>>>(state, lr, beta1, beta2, eps, weight_decay);
    gpu::check(cudaGetLastError(), "adamw_set_hyperparameters kernel launch");
}

inline void adamw_set_hyperparameters(adamw_state* state, const adamw_hyperparameters& h, cudaStream_t stream) {
    adamw_set_hyperparameters(state, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, stream);
}

// Advances the step counter and the derived scalars (one thread; capturable).
inline void adamw_begin_step(adamw_state* state, cudaStream_t stream) {
    detail::adamw_begin_step_kernel<<<1, 1, 0, stream>>>(state);
    gpu::check(cudaGetLastError(), "adamw_begin_step kernel launch");
}

// One AdamW update of params[0, n) from grads, moments m and v (zero before step 1);
// params_bf16 (may be null) receives the updated weights rounded to bf16.
inline void adamw_update(float* params, const float* grads, float* m, float* v, bf16* params_bf16, std::size_t n,
                         bool decays, const adamw_state* state, cudaStream_t stream) {
    if (n == 0) return;
    constexpr unsigned int threads = 256;
    detail::adamw_update_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(
        params, grads, m, v, params_bf16, n, decays, state);
    gpu::check(cudaGetLastError(), "adamw_update kernel launch");
}

// The update over flat buffers split into decaying and non-decaying ranges.
inline void adamw_update(float* params, const float* grads, float* m, float* v, bf16* params_bf16,
                         std::span<const adamw_range> ranges, const adamw_state* state, cudaStream_t stream) {
    for (const adamw_range& r : ranges)
        adamw_update(params + r.offset, grads + r.offset, m + r.offset, v + r.offset,
                     params_bf16 != nullptr ? params_bf16 + r.offset : nullptr, r.size, r.decays, state, stream);
}

}  // namespace weft::exec::cuda_detail
