// The optimizer step's kernels (optimizer_step.cuh launches them and says what they repeat of
// the host, and how): AdamW's and SGD's updates, the averaging's scaling, and the summary of
// the reduced gradients. They compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block, without a
// GPU.
#pragma once

#include <cstddef>
#include <type_traits>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/exec/cuda/optimizer_step_types.hpp"
#include "weft/optim/adamw_factors.hpp"
#include "weft/optim/sgd_update.hpp"

namespace weft::exec::cuda_detail {

// One step's scalars, as optim::adamw forms them on the host.
using adamw_step_factors = optim::adamw_factors<float>;

namespace detail {

// One element of AdamW's update, in the host's order of IEEE-rounded operations: p, m and v
// updated from the gradient g.
__device__ inline void adamw_element(float& p, float g, float& m, float& v, const adamw_step_factors& f,
                                     bool decays) {
    if (f.grad_scale != 1.0f) g = __fmul_rn(g, f.grad_scale);
    if (decays) p = __fmul_rn(p, f.decay);
    m = f.lerp_from_start ? __fadd_rn(m, __fmul_rn(f.one_minus_beta1, __fsub_rn(g, m)))
                          : __fsub_rn(g, __fmul_rn(__fsub_rn(g, m), f.beta1));
    v = __fadd_rn(__fmul_rn(v, f.beta2), __fmul_rn(__fmul_rn(f.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), f.bias_correction2_sqrt), f.eps);
    p = __fadd_rn(p, __fmul_rn(-f.step_size, __fdiv_rn(m, denom)));
}

// This thread's elements of [0, n) of one AdamW update (a grid-stride loop), shared by every
// AdamW kernel (adamw.cuh's too); params_bf16, when not null, gets the new weights in bf16.
__device__ inline void adamw_grid_stride(float* params, const float* grads, float* m, float* v, bf16* params_bf16,
                                         std::size_t n, const adamw_step_factors& f, bool decays) {
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        float p = params[i], mi = m[i], vi = v[i];
        adamw_element(p, grads[i], mi, vi, f, decays);
        m[i] = mi;
        v[i] = vi;
        params[i] = p;
        if (params_bf16 != nullptr) params_bf16[i] = __float2bfloat16_rn(p);
    }
}

template <class Scalar>
__global__ void scale_kernel(Scalar* values, std::size_t n, Scalar factor) {
    static_assert(std::is_same_v<Scalar, float>, "the optimizer kernels update fp32 state");
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x)
        values[i] = __fmul_rn(values[i], factor);
}

template <class Scalar>
__global__ void adamw_exact_kernel(Scalar* params, const Scalar* grads, Scalar* m, Scalar* v, std::size_t n,
                                   adamw_step_factors f, bool decays) {
    static_assert(std::is_same_v<Scalar, float>, "the optimizer kernels update fp32 state");
    adamw_grid_stride(params, grads, m, v, nullptr, n, f, decays);
}

// SGD's update, in the host's order of IEEE-rounded operations (optim::sgd_update_on_host).
template <class Scalar>
__global__ void sgd_exact_kernel(Scalar* params, const Scalar* grads, Scalar* buffer, std::size_t n,
                                 optim::sgd_factors<float> f, bool decays) {
    static_assert(std::is_same_v<Scalar, float>, "the optimizer kernels update fp32 state");
    const bool decay = decays && f.weight_decay != 0.0f;
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        float g = grads[i];
        float p = params[i];
        if (f.grad_scale != 1.0f) g = __fmul_rn(g, f.grad_scale);
        if (decay) g = __fadd_rn(g, __fmul_rn(f.weight_decay, p));
        if (f.use_momentum) {
            g = f.first_step ? g : __fadd_rn(__fmul_rn(f.momentum, buffer[i]), g);
            buffer[i] = g;
        }
        params[i] = __fsub_rn(p, __fmul_rn(f.lr, g));
    }
}

__device__ inline double warp_sum_double(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Sum over the block of two values at once, returned to thread 0. blockDim.x = 256.
__device__ inline void block_sum_pair(double& a, double& b) {
    __shared__ double scratch[2][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    a = warp_sum_double(a);
    b = warp_sum_double(b);
    if (lane == 0) {
        scratch[0][warp] = a;
        scratch[1][warp] = b;
    }
    __syncthreads();
    if (warp == 0) {
        a = lane < 8 ? scratch[0][lane] : 0.0;
        b = lane < 8 ? scratch[1][lane] : 0.0;
        a = warp_sum_double(a);
        b = warp_sum_double(b);
    }
}

constexpr unsigned int summary_threads = 256;

// Block (x, y) sums the squares of its share of segment y into partials[y * gridDim.x + x].
template <class Scalar>
__global__ void segment_squares_kernel(const Scalar* values, const gradient_segment* segments, double* partials) {
    const gradient_segment s = segments[blockIdx.y];
    double sum = 0;
    for (std::size_t i = s.first + blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < s.last;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const double g = values[i];
        sum += g * g;
    }
    double unused = 0;
    block_sum_pair(sum, unused);
    if (threadIdx.x == 0) partials[std::size_t(blockIdx.y) * gridDim.x + blockIdx.x] = sum;
}

// One block: result[0] = the counted segments' sum, result[1] = every segment's (non-finite
// exactly when an element is: squares of finite floats cannot overflow a double here).
template <class Scalar>
__global__ void summary_total_kernel(const double* partials, const gradient_segment* segments, int blocks_per_segment,
                                     std::size_t count, double* result) {
    double counted = 0, total = 0;
    for (std::size_t i = threadIdx.x; i < count; i += blockDim.x) {
        total += partials[i];
        if (segments[i / std::size_t(blocks_per_segment)].counted) counted += partials[i];
    }
    block_sum_pair(counted, total);
    if (threadIdx.x == 0) {
        result[0] = counted;
        result[1] = total;
    }
}

}  // namespace detail

}  // namespace weft::exec::cuda_detail
