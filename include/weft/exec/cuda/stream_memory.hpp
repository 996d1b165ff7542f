// Stream-ordered device memory that follows an action's graph (action_recording.hpp): what
// device matrices and the backend's temporaries allocate and free with.
//
// With no recording current, or a measuring one: cudaMallocAsync / cudaFreeAsync on the
// stream (plain cudaMalloc / cudaFree without one). Under capture the same calls become the
// graph's allocation and free nodes, so the memory is the graph's ("in graph": its address
// is fixed for the graph's life). A shadow gets the capture's addresses back and frees
// nothing of the graph's: the launch does both. Memory from outside the graph freed during a
// capture or a shadow is freed after the launch, in stream order (a graph's free node can
// only free a graph's allocation).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "weft/exec/cuda/action_recording.hpp"
#include "weft/gpu/capture_lock.hpp"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

struct stream_allocation {
    void* pointer = nullptr;
    bool in_graph = false;  // allocated by an action's graph (freed by cudaFreeAsync or a graph)
};

[[nodiscard]] inline stream_allocation allocate_on_stream(std::size_t bytes, cudaStream_t stream) {
    action_recording* recording = current_recording();
    if (recording != nullptr && recording->mode() == recording_mode::replaying)
        return {recording->replayed_allocation(bytes), true};
    void* pointer = nullptr;
    if (stream != nullptr) {
        gpu::check(cudaMallocAsync(&pointer, bytes, stream), "cudaMallocAsync(" + std::to_string(bytes) + " bytes)");
    } else {
        const gpu::device_wide_scope no_capture;  // cudaMalloc may wait for the device: capture_lock.hpp
        gpu::check(cudaMalloc(&pointer, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
    }
    const bool captured = recording != nullptr && recording->mode() == recording_mode::capturing;
    if (captured) recording->note_allocation(pointer, bytes);
    return {pointer, captured};
}

// In a destructor's path: a failed free is not reported (the pool or the driver reclaims the
// memory at exit either way), and a deferred one is freed by the action's owner.
inline void free_on_stream(const stream_allocation& memory, cudaStream_t stream) noexcept {
    if (memory.pointer == nullptr) return;
    // An address a failed capture or shadow handed out holds nothing to free.
    if (memory.in_graph && action_recording::take_abandoned(memory.pointer)) return;
    action_recording* recording = current_recording();
    if (recording != nullptr && recording->mode() != recording_mode::measuring) {
        try {
            if (recording->mode() == recording_mode::replaying && memory.in_graph) {
                recording->note_free(memory.pointer, true, stream);  // the graph's free node does it
                return;
            }
            if (!memory.in_graph) {
                recording->note_free(memory.pointer, false, stream);  // after the launch
                return;
            }
            recording->note_free(memory.pointer, true, stream);  // captured: becomes a free node
        } catch (...) {
            // A shadow that diverged at a free: the action throws at its next step or at
            // finish(); the memory's fate is the graph's, so nothing is freed here.
            return;
        }
    }
    if (stream != nullptr)
        static_cast<void>(cudaFreeAsync(memory.pointer, stream));
    else
        gpu::free_device_memory(memory.pointer);
}

}  // namespace weft::exec::cuda_detail
