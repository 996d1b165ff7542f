// exec::cuda's staging of host values on their way to the GPU (weft/exec/staging_ring.hpp):
// page-locked host buffers (cudaMallocHost), from which cudaMemcpyAsync is asynchronous
// (from pageable memory the driver may first wait for the stream), and CUDA events on the
// backend's stream that say when a buffer may be written again.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "weft/exec/cuda/wait_limit.hpp"
#include "weft/exec/staging_ring.hpp"
#include "weft/gpu/capture_lock.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream.hpp"

namespace weft::exec::cuda_detail {

struct pinned_upload_platform {
    cudaStream_t stream = nullptr;  // the backend's: copies queue behind its kernels
    using fence = gpu::event;

    [[nodiscard]] void* allocate(std::size_t bytes) {
        const gpu::device_wide_scope no_capture;  // capture_lock.hpp
        void* buffer = nullptr;
        gpu::check(cudaMallocHost(&buffer, bytes), "cudaMallocHost(" + std::to_string(bytes) + " bytes) for uploads");
        return buffer;
    }
    void deallocate(void* buffer) noexcept { gpu::free_pinned_memory(buffer); }
    void copy_async(void* to, const void* staged, std::size_t bytes) {
        gpu::check(cudaMemcpyAsync(to, staged, bytes, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (staged host values to the device)");
    }
    void record(fence& f) { f.record(stream); }
    void wait(fence& f) { synchronize(f.get(), limit, "a wait for a pinned upload buffer's last copy"); }
    wait_limit limit{};  // the backend's (exec::cuda::set_wait_limit)
};

using pinned_uploads = exec::staging_ring<pinned_upload_platform>;

}  // namespace weft::exec::cuda_detail
