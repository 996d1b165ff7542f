// fp32 <-> bf16 conversion: the elementwise kernels (the load/store helpers every weft kernel
// uses, so that arithmetic is fp32 whatever the storage type, are element_types.cuh's).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert_kernels.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

namespace detail {

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than n needs.
inline unsigned int elementwise_blocks(std::size_t n, unsigned int threads) {
    const std::size_t wanted = (n + threads - 1) / threads;
    return static_cast<unsigned int>(wanted < 65536 ? wanted : 65536);
}

}  // namespace detail

// out[i] = in[i] rounded to To (round to nearest even for bf16), for float and bf16 in any pairing.
template <class From, class To>
void convert(const From* in, To* out, std::size_t n, cudaStream_t stream) {
    if (n == 0) return;
    require(in != nullptr && out != nullptr, "convert: in, out", "a null pointer", "must be device pointers");
    constexpr unsigned int threads = 256;
    detail::convert_kernel<From, To><<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(in, out, n);
    gpu::check(cudaGetLastError(), "convert kernel launch");
}

// out[i] = in[i] + addend[i % period], added in fp32 and then rounded to To. Over row-major
// rows the addend repeats every `period` elements: a row-parallel layer's bias (period: the
// width) after its sum, or the position embedding (period: seq_len * width) after the
// vocabulary-parallel lookup's sum, each added as the host adds it before one rounding.
template <class To>
void convert_adding_periodic(const float* in, const float* addend, std::size_t period, To* out, std::size_t n,
                             cudaStream_t stream) {
    if (n == 0) return;
    require(in != nullptr && addend != nullptr && out != nullptr, "convert_adding_periodic: in, addend, out",
            "a null pointer", "must be device pointers");
    require(period > 0 && n % period == 0, "convert_adding_periodic: period", period,
            "must be positive and divide n = " + std::to_string(n));
    constexpr unsigned int threads = 256;
    detail::convert_adding_periodic_kernel<To>
        <<<detail::elementwise_blocks(n, threads), threads, 0, stream>>>(in, addend, period, out, n);
    gpu::check(cudaGetLastError(), "convert_adding_periodic kernel launch");
}

}  // namespace weft::exec::cuda_detail
