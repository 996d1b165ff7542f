// Softmax cross-entropy fused forward+backward, one block per row of logits [rows,
// classes]: per-row losses, dlogits = scale/rows (softmax - onehot), and a
// deterministic mean of the losses (the CPU backend's cross_entropy, on the GPU). Two passes
// over each row (the max and the sum together, then the gradient), in 16-byte loads where
// the rows are aligned.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/cross_entropy_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

// losses[r] = -log softmax(logits[r])[labels[r]]; when dlogits is not null it is
// written with scale * d(mean loss)/d(logits). A label outside [0, classes) yields NaN.
// Rows of logits and dlogits lie `stride` >= classes elements apart: a vocabulary padded
// to an aligned width for the GEMMs, whose padding columns are ignored here and get a
// zero gradient.
template <class T>
void cross_entropy_forward_backward(const T* logits, const std::int32_t* labels, float* losses, T* dlogits, int rows,
                                    int classes, int stride, float scale, cudaStream_t stream) {
    require(rows > 0, "cross_entropy: rows", rows, "must be positive");
    require(classes > 0, "cross_entropy: classes", classes, "must be positive");
    require(stride >= classes, "cross_entropy: stride", stride,
            "must be at least classes = " + std::to_string(classes));
    // 16-byte loads where every row starts on a 16-byte boundary (the padded vocabulary).
    const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
    const bool vectorized = stride % detail::vector_elements<T> == 0 && aligned(logits) &&
                            (dlogits == nullptr || aligned(dlogits));
    if (vectorized)
        detail::cross_entropy_kernel<true><<<rows, detail::cross_entropy_threads, 0, stream>>>(
            logits, labels, losses, dlogits, classes, stride, scale / float(rows));
    else
        detail::cross_entropy_kernel<false><<<rows, detail::cross_entropy_threads, 0, stream>>>(
            logits, labels, losses, dlogits, classes, stride, scale / float(rows));
    gpu::check(cudaGetLastError(), "cross_entropy kernel launch");
}

// Unpadded rows (stride = classes).
template <class T>
void cross_entropy_forward_backward(const T* logits, const std::int32_t* labels, float* losses, T* dlogits, int rows,
                                    int classes, float scale, cudaStream_t stream) {
    cross_entropy_forward_backward(logits, labels, losses, dlogits, rows, classes, classes, scale, stream);
}

// *out = mean of values[0, n), summed in a fixed order (bit-reproducible).
inline void mean(const float* values, int n, float* out, cudaStream_t stream) {
    require(n > 0, "mean: n", n, "must be positive");
    detail::mean_kernel<<<1, detail::mean_threads, 0, stream>>>(values, n, out);
    gpu::check(cudaGetLastError(), "mean kernel launch");
}

}  // namespace weft::exec::cuda_detail
