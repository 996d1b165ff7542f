// The step after backward on the GPU, over the training state's fp32 flat buffers where
// they live (exec::optimizer_kernels): the averaging of reduced gradients, AdamW's or SGD's
// update of one range, and the summary of a stage's reduced gradients (the counted sum of
// squares for the global norm, and whether every element is finite).
//
// The updates repeat optim::adamw_update_on_host and optim::sgd_update_on_host bit for bit:
// every operation is an IEEE-rounded intrinsic (__fmul_rn and friends, which nvcc never
// contracts into an FMA) in PyTorch's order, as the host's loops compute it. The summary
// sums in a fixed order (per-block trees, then one block over the partials in index order),
// so a run repeats bit for bit; it differs from the host's sequential double sum only by
// rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/optimizer_step_kernels.cuh"
#include "weft/exec/cuda/optimizer_step_types.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/optim/sgd_update.hpp"

namespace weft::exec::cuda_detail {

// Stream-ordered: values [0, n) *= factor, each product IEEE-rounded as the host's.
template <class Scalar>
void scale_exact(Scalar* values, std::size_t n, Scalar factor, cudaStream_t stream) {
    if (n == 0) return;
    require(values != nullptr, "scale_exact: values", "a null pointer", "must be a device or managed pointer");
    constexpr unsigned int threads = 256;
    detail::scale_kernel<Scalar><<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(values, n, factor);
    gpu::check(cudaGetLastError(), "scale_exact kernel launch");
}

// Stream-ordered: params, m and v [0, n) updated from grads (optim::adamw_update_on_host).
template <class Scalar>
void adamw_update_exact(Scalar* params, const Scalar* grads, Scalar* m, Scalar* v, std::size_t n,
                        const adamw_step_factors& f, bool decays, cudaStream_t stream) {
    if (n == 0) return;
    require(params != nullptr && grads != nullptr && m != nullptr && v != nullptr,
            "adamw_update_exact: params, grads, m, v", "a null pointer", "must be device or managed pointers");
    constexpr unsigned int threads = 256;
    detail::adamw_exact_kernel<Scalar>
        <<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(params, grads, m, v, n, f, decays);
    gpu::check(cudaGetLastError(), "adamw_update_exact kernel launch");
}

// Stream-ordered: params (and the momentum buffer, where f.use_momentum) [0, n) updated from
// grads (optim::sgd_update_on_host).
template <class Scalar>
void sgd_update_exact(Scalar* params, const Scalar* grads, Scalar* buffer, std::size_t n,
                      const optim::sgd_factors<float>& f, bool decays, cudaStream_t stream) {
    if (n == 0) return;
    require(params != nullptr && grads != nullptr && (buffer != nullptr || !f.use_momentum),
            "sgd_update_exact: params, grads, momentum buffer", "a null pointer",
            "must be device or managed pointers");
    constexpr unsigned int threads = 256;
    detail::sgd_exact_kernel<Scalar>
        <<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(params, grads, buffer, n, f, decays);
    gpu::check(cudaGetLastError(), "sgd_update_exact kernel launch");
}

// Blocks per segment for a summary whose longest segment has this many elements (1 to 64).
[[nodiscard]] inline int summary_blocks_per_segment(std::size_t longest_segment) {
    const std::size_t wanted = (longest_segment + detail::summary_threads - 1) / detail::summary_threads;
    return int(wanted < 1 ? 1 : (wanted > 64 ? 64 : wanted));
}
// Stream-ordered: result[0] = the sum of squares over the counted segments of values,
// result[1] = over all of them, both in device memory. segments (device memory,
// `segment_count` of them, at most 65535) and partials (device memory, segment_count x
// blocks_per_segment doubles) are the caller's.
template <class Scalar>
void summarize_segments(const Scalar* values, const gradient_segment* segments, int segment_count,
                        int blocks_per_segment, double* partials, double* result, cudaStream_t stream) {
    require(segment_count >= 1 && segment_count <= 65535, "summarize_segments: segment_count", segment_count,
            "must be in [1, 65535]");
    require(blocks_per_segment >= 1 && blocks_per_segment <= 64, "summarize_segments: blocks_per_segment",
            blocks_per_segment, "must be in [1, 64]");
    const dim3 grid{static_cast<unsigned>(blocks_per_segment), static_cast<unsigned>(segment_count)};
    detail::segment_squares_kernel<Scalar><<<grid, detail::summary_threads, 0, stream>>>(values, segments, partials);
    gpu::check(cudaGetLastError(), "segment_squares kernel launch");
    detail::summary_total_kernel<Scalar><<<1, detail::summary_threads, 0, stream>>>(
        partials, segments, blocks_per_segment, std::size_t(segment_count) * std::size_t(blocks_per_segment),
        result);
    gpu::check(cudaGetLastError(), "summary_total kernel launch");
}

}  // namespace weft::exec::cuda_detail
