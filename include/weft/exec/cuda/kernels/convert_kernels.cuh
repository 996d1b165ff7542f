// The conversions' kernels (convert.cuh launches them), grid-stride loops.
// They compile with a host compiler too (device_or_emulated.cuh), and
// tests/exec/cuda/kernels_emulated_test.cpp runs them on an emulated thread block, without a
// GPU.
#pragma once

#include <cstddef>

#include "weft/exec/cuda/kernels/device_or_emulated.cuh"
#include "weft/exec/cuda/kernels/element_types.cuh"

namespace weft::exec::cuda_detail::detail {

template <class From, class To>
__global__ void convert_kernel(const From* in, To* out, std::size_t n) {
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x)
        out[i] = from_float<To>(to_float(in[i]));
}

template <class To>
__global__ void convert_adding_periodic_kernel(const float* in, const float* addend, std::size_t period, To* out,
                                               std::size_t n) {
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x)
        out[i] = from_float<To>(in[i] + addend[i % period]);
}

}  // namespace weft::exec::cuda_detail::detail
