// exec::cuda's state memory (core/state_memory.hpp): CUDA managed memory, one address for
// the GPU and the host. The stage's kernels read weights and add gradients there on the
// device, while everything that treats the training state as host buffers (optimizers,
// gradient norms, checkpoints, layout switches, host communicators) goes on working on the
// same buffers; the driver moves pages to whichever side touches them. Host code must wait
// for the kernels that write a buffer (the backend's synchronize()) before reading it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "weft/core/state_memory.hpp"
#include "weft/exec/cuda/runtime.hpp"

namespace weft::cuda {

namespace detail {

inline void* managed_allocate(std::size_t bytes) {
    void* pointer = nullptr;
    check(cudaMallocManaged(&pointer, bytes, cudaMemAttachGlobal),
          "cudaMallocManaged(" + std::to_string(bytes) + " bytes) for training state");
    // Zeroed on the device, where the kernels will want the pages, and finished before the
    // host may write the buffer.
    check(cudaMemset(pointer, 0, bytes), "cudaMemset (training state)");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after zeroing training state)");
    return pointer;
}

// On the GPU, where the pages are wanted next (gradients accumulate there), and finished
// before the host or another stream may touch the buffer. The caller has waited for the
// kernels that wrote it (the engine synchronizes its backend before the step), so only this
// memset is waited for, not other rank threads' work on the same GPU.
inline void managed_zero(void* pointer, std::size_t bytes) {
    check(cudaMemsetAsync(pointer, 0, bytes, nullptr), "cudaMemsetAsync (training state)");
    check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (after zeroing training state)");
}

// On the GPU, as managed_zero: the caller has waited for the kernels that wrote `from`.
inline void managed_copy(void* to, const void* from, std::size_t bytes) {
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, nullptr), "cudaMemcpyAsync (training state)");
    check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (after copying training state)");
}

inline void managed_deallocate(void* pointer, std::size_t /*bytes*/) noexcept {
    // Nothing to report to from here; the driver reclaims the memory at exit either way.
    static_cast<void>(cudaFree(pointer));
}

}  // namespace detail

[[nodiscard]] inline const state_memory& managed_state_memory() {
    static constexpr state_memory managed{"CUDA managed", &detail::managed_allocate, &detail::managed_deallocate,
                                          false, &detail::managed_zero, &detail::managed_copy};
    return managed;
}

}  // namespace weft::cuda
