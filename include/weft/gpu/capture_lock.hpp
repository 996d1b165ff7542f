// One lock for the process: held while a thread captures an action's CUDA graph
// (weft/exec/cuda/action_graphs.hpp), and by every call that waits for, or records onto,
// work beyond its own stream. CUDA refuses to synchronize the device (cudaDeviceSynchronize,
// and cudaFree, cudaMallocManaged, cudaMallocHost and cudaFreeHost, which may do it
// implicitly) while any stream on it is being captured, and an event recorded on another
// thread's capturing stream becomes part of that capture, never completing for the host.
// Rank threads sharing a GPU do both: comm::host_staged waits for the device before staging,
// the training state's pool records fences on every stream. So each side holds this lock:
// a capture waits for such a call to finish and the call waits for the capture, which holds
// no wait of its own (an action only queues work). Recursive: a holder may call another.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>

namespace weft::gpu {

[[nodiscard]] inline std::recursive_mutex& capture_lock() {
    static std::recursive_mutex lock;
    return lock;
}

// Holds capture_lock() for a scope.
class device_wide_scope {
public:
    device_wide_scope() : guard_(capture_lock()) {}

private:
    std::lock_guard<std::recursive_mutex> guard_;
};

// cudaFree and cudaFreeHost, which may wait for the device, under the lock. For destructors'
// paths: a failure (of the free, or the lock's system_error) is not reported, and the memory
// is the driver's to reclaim at exit.
inline void free_device_memory(void* pointer) noexcept {
    try {
        const device_wide_scope no_capture;
        static_cast<void>(cudaFree(pointer));
    } catch (...) {
    }
}
inline void free_pinned_memory(void* pointer) noexcept {
    try {
        const device_wide_scope no_capture;
        static_cast<void>(cudaFreeHost(pointer));
    } catch (...) {
    }
}

}  // namespace weft::gpu
