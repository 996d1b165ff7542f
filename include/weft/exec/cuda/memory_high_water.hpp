// The most device memory a GPU's stream-ordered work has held at once: what a run's log
// reports so that eager and graphed runs (exec::cuda::enable_action_graphs) can be compared.
//
// Eager actions allocate from the device's current memory pool (cudaMallocAsync,
// stream_memory.hpp); actions replayed as CUDA graphs allocate from the graphs' own pool,
// which CUDA keeps apart. Each pool keeps a high-water mark of the bytes in use. Both are
// device-wide: rank threads sharing one GPU count together. The training state (CUDA managed
// memory) is in neither; the engine's memory report counts it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

struct memory_high_water {
    std::size_t stream_pool_bytes = 0;  // the current pool's most bytes in use at once
    std::size_t graph_bytes = 0;        // the graphs' pool's most bytes in use at once
};

// GPU `device`'s high-water marks since the process started (or since they were last reset).
[[nodiscard]] inline memory_high_water memory_high_water_of(int device) {
    const std::string where = " of GPU " + std::to_string(device);
    cudaMemPool_t pool = nullptr;
    gpu::check(cudaDeviceGetMemPool(&pool, device), "cudaDeviceGetMemPool" + where);  // what cudaMallocAsync uses
    std::uint64_t pool_high = 0, graph_high = 0;  // cuuint64_t, as both attributes are
    gpu::check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &pool_high),
          "cudaMemPoolGetAttribute(cudaMemPoolAttrUsedMemHigh)" + where);
    gpu::check(cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &graph_high),
          "cudaDeviceGetGraphMemAttribute(cudaGraphMemAttrUsedMemHigh)" + where);
    return {.stream_pool_bytes = static_cast<std::size_t>(pool_high),
            .graph_bytes = static_cast<std::size_t>(graph_high)};
}

}  // namespace weft::exec::cuda_detail
