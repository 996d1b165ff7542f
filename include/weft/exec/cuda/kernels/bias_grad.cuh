// Bias gradient of a linear layer: db += column sums of dy [rows, cols], in a fixed
// order (no atomics, kernels/column_sums.cuh) so that results are bit-reproducible, fp32
// accumulation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/column_sums.cuh"
#include "weft/exec/cuda/kernels/convert.cuh"

namespace weft::exec::cuda_detail {

namespace detail {

template <class T>
struct bias_grad_terms {
    const T* dy;
    __device__ void operator()(int /*row*/, std::size_t i, float (&sums)[1]) const { sums[0] += to_float(dy[i]); }
};

}  // namespace detail

// `partials`: column_sum_scratch_floats(rows, cols, 1) floats of device scratch.
template <class T>
void bias_grad(const T* dy, float* db, float* partials, int rows, int cols, cudaStream_t stream) {
    require(rows > 0, "bias_grad: rows", rows, "must be positive");
    require(cols > 0, "bias_grad: cols", cols, "must be positive");
    detail::column_sums<1>(detail::bias_grad_terms<T>{dy}, partials, detail::column_outputs<1>{{db}}, rows, cols,
                           stream, "bias_grad");
}

}  // namespace weft::exec::cuda_detail
