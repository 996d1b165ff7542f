// Bias gradient of a linear layer: db += column sums of dy [rows, cols], in a fixed
// order (no atomics) so that results are bit-reproducible, fp32 accumulation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda {

namespace detail {

constexpr int bias_grad_columns = 32;
constexpr int bias_grad_row_lanes = 32;

template <class T>
__global__ void bias_grad_kernel(const T* dy, float* db, int rows, int cols) {
    __shared__ float partial[bias_grad_row_lanes][bias_grad_columns + 1];
    const int c = blockIdx.x * bias_grad_columns + threadIdx.x;
    float sum = 0;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += bias_grad_row_lanes) sum += to_float(dy[std::size_t(r) * cols + c]);
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0;
        for (int r = 0; r < bias_grad_row_lanes; ++r) total += partial[r][threadIdx.x];
        db[c] += total;
    }
}

}  // namespace detail

template <class T>
void bias_grad(const T* dy, float* db, int rows, int cols, cudaStream_t stream) {
    require(rows > 0, "bias_grad: rows", rows, "must be positive");
    require(cols > 0, "bias_grad: cols", cols, "must be positive");
    const unsigned int blocks = (cols + detail::bias_grad_columns - 1) / detail::bias_grad_columns;
    detail::bias_grad_kernel<<<blocks, dim3(detail::bias_grad_columns, detail::bias_grad_row_lanes), 0, stream>>>(
        dy, db, rows, cols);
    check(cudaGetLastError(), "bias_grad kernel launch");
}

}  // namespace weft::cuda
