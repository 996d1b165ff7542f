// Shared by the CUDA benchmarks: GPU detection with the skip exit code, the dense bf16
// peak of known GPUs for MFU, deterministic device fills, and event timing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "weft/exec/cuda/peak_flops.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream.hpp"

namespace weft_bench {

// Dense bf16 tensor-core peak in TFLOP/s (vendor datasheets, without sparsity); 0 if unknown.
using weft::exec::cuda_detail::bf16_peak_tflops;  // the one table (weft/exec/cuda/peak_flops.hpp)

// Values in [-scale, scale) from a hash of the index: reproducible, no curand needed.
template <class T>
__global__ void fill_kernel(T* out, std::size_t n, std::uint32_t seed, float scale) {
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        std::uint32_t h = std::uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        const float v = (float(h & 0xffffff) / float(0x1000000) * 2.0f - 1.0f) * scale;
        if constexpr (sizeof(T) == 2)
            out[i] = __float2bfloat16_rn(v);
        else
            out[i] = T(v);
    }
}

template <class T>
void fill(T* out, std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    fill_kernel<<<1024, 256>>>(out, n, seed, scale);
    weft::gpu::check(cudaGetLastError(), "fill kernel launch");
}

// Median-free simple timing: `warmup` untimed runs, then the mean over `iterations`.
template <class Fn>
double time_ms(cudaStream_t stream, int warmup, int iterations, Fn&& fn) {
    // The benchmarks' set-up (fill, fill_zero) runs on the legacy default stream, which a
    // non-blocking weft::gpu::stream does not wait for: finish it before timing.
    weft::gpu::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (int i = 0; i < warmup; ++i) fn();
    weft::gpu::event start, stop;
    start.record(stream);
    for (int i = 0; i < iterations; ++i) fn();
    stop.record(stream);
    stop.synchronize();
    return double(stop.elapsed_ms_since(start)) / iterations;
}

// Returns false (after printing why) when there is no GPU: the caller exits 77.
inline bool have_gpu() {
    if (weft::gpu::device_count() == 0) {
        std::printf("no CUDA device: benchmark skipped\n");
        return false;
    }
    return true;
}

}  // namespace weft_bench
