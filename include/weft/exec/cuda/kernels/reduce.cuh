// Deterministic warp and block reductions (a fixed shuffle tree, then warp 0 over the
// warps' partials) shared by the kernels, so every run sums in the same order.
#pragma once

#include <cuda_runtime_api.h>
#include <math_constants.h>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"

namespace weft::exec::cuda_detail::detail {

// After the xor butterfly every lane holds the same value (a + b == b + a exactly).
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum (or max) over the whole block, returned to every thread. `scratch` holds 32
// floats of shared memory; blockDim.x must be a multiple of 32. Contains __syncthreads.
template <bool Max>
__device__ inline float block_reduce(float v, float* scratch) {
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int warps = blockDim.x / 32;
    v = Max ? warp_max(v) : warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : (Max ? -CUDART_INF_F : 0.0f);
        w = Max ? warp_max(w) : warp_sum(w);
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    return scratch[0];
}

__device__ inline float block_sum(float v, float* scratch) { return block_reduce<false>(v, scratch); }
__device__ inline float block_max(float v, float* scratch) { return block_reduce<true>(v, scratch); }

}  // namespace weft::exec::cuda_detail::detail
