// What a communicator that hands device memory to the host side (comm::host_staged, which
// copies it through host memory, and comm::device_direct, which gives it to a CUDA-aware MPI)
// needs from CUDA: which buffers are device memory, and a wait until the GPU has finished
// with them. MPI and the host are not ordered with CUDA's streams, and whoever wrote or last
// read a buffer may have done it on any stream, so the whole device is waited for.
#pragma once

#include <cuda_runtime_api.h>

#include "weft/gpu/capture_lock.hpp"
#include "weft/gpu/runtime.hpp"

namespace weft::comm::detail {

// Whether `p` is device memory the host cannot read (managed memory it can).
inline bool is_device_only(const void* p) { return gpu::memory_type(p) == cudaMemoryTypeDevice; }

// Waits until the kernels queued on every stream of the device have finished, so that
// something other than a stream may read or write their buffers. Not while another rank
// thread captures an action's graph on this device (weft/gpu/capture_lock.hpp).
inline void finish_device_work(const char* why) {
    const gpu::device_wide_scope no_capture;
    gpu::check(cudaDeviceSynchronize(), why);
}

}  // namespace weft::comm::detail
