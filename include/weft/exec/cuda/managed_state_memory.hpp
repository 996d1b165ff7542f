// exec::cuda's state memory (core/state_memory.hpp): CUDA managed memory, one address for
// the GPU and the host. The stage's kernels read weights and add gradients there on the
// device, while everything that treats the training state as host buffers (optimizers,
// gradient norms, checkpoints, layout switches, host communicators) goes on working on the
// same buffers; the driver moves pages to whichever side touches them. Host code must wait
// for the kernels that write a buffer (the backend's synchronize()) before reading it.
// Freed buffers are kept in a pool for the next allocation of their size (core/block_pool.hpp):
// ZeRO's per-step buffers then cost a zeroing on the GPU, not an allocation and a wait for
// the whole device. A buffer may be freed while queued kernels still use it: the pool fences
// it with events on weft's compute streams (gpu::stream_registry.hpp, which says why a collective's
// use is covered too) and waits for them only when it hands the buffer out again.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "weft/core/block_pool.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/exec/cuda/wait_limit.hpp"
#include "weft/gpu/capture_lock.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream_registry.hpp"

namespace weft::exec::cuda_detail {

namespace detail {

// On the GPU, where the pages are wanted next (gradients accumulate there), and finished
// before the host or another stream may touch the buffer: a wait for this memset on the
// legacy default stream only, not for the device (weft's streams are non-blocking, so
// nothing else is waited for; a wait for the device could wait for a receive posted ahead,
// see gpu::stream_registry.hpp). The caller has waited for the kernels that wrote the buffer
// (the engine synchronizes its backend before the step, the pool waits for a freed
// buffer's fence).
inline void managed_zero(void* pointer, std::size_t bytes) {
    gpu::check(cudaMemsetAsync(pointer, 0, bytes, nullptr), "cudaMemsetAsync (training state)");
    gpu::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (after zeroing training state)");
}

inline void* managed_allocate_new(std::size_t bytes) {
    const gpu::device_wide_scope no_capture;  // capture_lock.hpp
    void* pointer = nullptr;
    gpu::check(cudaMallocManaged(&pointer, bytes, cudaMemAttachGlobal),
          "cudaMallocManaged(" + std::to_string(bytes) + " bytes) for training state");
    try {
        managed_zero(pointer, bytes);
    } catch (...) {
        static_cast<void>(cudaFree(pointer));
        throw;
    }
    return pointer;
}

// On the GPU, as managed_zero: the caller has waited for the kernels that wrote `from`.
inline void managed_copy(void* to, const void* from, std::size_t bytes) {
    gpu::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, nullptr), "cudaMemcpyAsync (training state)");
    gpu::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (after copying training state)");
}

// cudaFree waits for the device's work first, so a buffer queued work still uses may go.
// (Only past the pool's capacity, at a layout switch and at exit.)
inline void managed_free(void* pointer, std::size_t /*bytes*/) noexcept {
    // Nothing to report to from here; the driver reclaims the memory at exit either way.
    gpu::free_device_memory(pointer);  // under the capture lock
}

// The pool's fences: events after the work so far on every stream weft made. Null (no
// event could be made) sends the buffer back through cudaFree.
// Not while a stream is captured (capture_lock.hpp): its event would be part of the capture.
inline void* managed_fence() noexcept {
    try {
        const gpu::device_wide_scope no_capture;
        return gpu::stream_fence::record();
    } catch (...) {  // the lock's system_error: then no fence, and the buffer goes through cudaFree
        return nullptr;
    }
}
inline bool managed_fence_passed(void* fence) noexcept { return static_cast<gpu::stream_fence*>(fence)->passed(); }
// Within the wait limit of the thread's backend (weft/exec/cuda/wait_limit.hpp): the work a
// fence follows may wait for a message that never comes.
inline void managed_fence_wait(void* fence) {
    const auto* f = static_cast<const gpu::stream_fence*>(fence);
    detail::wait_for_device(thread_wait_limit(), [f] { return f->query(); },
                            "a wait for a freed training-state buffer's work");
}
inline void managed_fence_drop(void* fence) noexcept {
    delete static_cast<gpu::stream_fence*>(fence);  // NOLINT(cppcoreguidelines-owning-memory): made by managed_fence
}

// Eight buffers: the reduced-gradient ranges and gathered parameters of a rank thread's
// stages, for the rank threads that share a GPU. Never destroyed, so that a buffer freed
// during the program's exit still finds it; the driver reclaims what it keeps.
inline block_pool& managed_pool() {
    static block_pool& pool = *new block_pool({&managed_allocate_new, &managed_free, &managed_zero, &managed_fence,
                                               &managed_fence_passed, &managed_fence_wait, &managed_fence_drop},
                                              8);
    return pool;
}

inline void managed_give_back_kept() noexcept { static_cast<void>(managed_pool().release_kept()); }

inline void* managed_allocate(std::size_t bytes) { return managed_pool().allocate(bytes); }
inline void managed_deallocate(void* pointer, std::size_t bytes) noexcept {
    managed_pool().deallocate(pointer, bytes);
}

}  // namespace detail

[[nodiscard]] inline const state_memory& managed_state_memory() {
    static constexpr state_memory managed{.name = "CUDA managed",
                                          .allocate = &detail::managed_allocate,
                                          .deallocate = &detail::managed_deallocate,
                                          .pages_releasable = false,
                                          .zero = &detail::managed_zero,
                                          .copy = &detail::managed_copy,
                                          .frees_after_queued_work = true,
                                          .give_back_kept = &detail::managed_give_back_kept};
    return managed;
}

}  // namespace weft::exec::cuda_detail
