// The residual connection: out = a + b elementwise (fp32 arithmetic, one rounding to the
// storage type), used for x + attn(...), x + mlp(...) and for summing the two gradient
// paths that meet at a residual branch in backward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/residual_add_kernels.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

// out[i] = a[i] + b[i] for i in [0, n). out may be a or b: every element is read and
// written by the same thread.
template <class T>
void residual_add(const T* a, const T* b, T* out, std::size_t n, cudaStream_t stream) {
    if (n == 0) return;
    require(a != nullptr && b != nullptr && out != nullptr, "residual_add: a, b, out", "a null pointer",
            "must be device pointers");
    constexpr unsigned int threads = 256;
    detail::residual_add_kernel<<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(a, b, out, n);
    gpu::check(cudaGetLastError(), "residual_add kernel launch");
}

}  // namespace weft::exec::cuda_detail
