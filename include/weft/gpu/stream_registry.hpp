// The compute streams weft has made in this process, so that a fence can mark every use of a
// state buffer so far: the backends' streams (weft::gpu::stream registers itself for its
// lifetime) carry the kernels and cuBLAS calls that read and write the training state, and
// the legacy default stream the state memory's own zeroing and copies. The state memory's
// pool (core/block_pool.hpp) fences a freed buffer this way instead of waiting for the whole
// device, so RESHARD's and ZeRO-2's frees do not stop the host mid-step.
//
// A communicator's stream (comm::nccl's) is not fenced: it holds receives posted ahead, and
// a host waiting for one could wait for a send its peer makes only after this rank sends
// more, a deadlock. Its collectives are covered all the same, because the engine frees a
// buffer a collective used only after that collective's request.wait(), which orders the
// compute stream after it: the compute stream's fence comes later. Whoever frees a state
// buffer outside the engine must do the same (or synchronize the request first).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

namespace weft::gpu {

class stream_registry {
public:
    // One per process, never destroyed, so that a stream destroyed during exit still finds it.
    static stream_registry& instance() {
        static stream_registry& registry = *new stream_registry();
        return registry;
    }

    // `stream` lives on the current device until remove(stream).
    void add(cudaStream_t stream) noexcept {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess) return;  // not usable anyway
        const std::scoped_lock lock(mutex_);
        try {
            streams_.push_back({stream, device});
        } catch (...) {  // out of host memory: the stream stays unregistered, its frees unfenced
        }
    }
    // Before the stream is destroyed, so that no fence records on it after.
    void remove(cudaStream_t stream) noexcept {
        const std::scoped_lock lock(mutex_);
        std::erase_if(streams_, [&](const entry& e) { return e.stream == stream; });
    }

    // Calls record(stream) for every registered stream, each with its device current, and for
    // the current device's legacy default stream, under the registry's lock (no stream is
    // destroyed meanwhile); restores the current device. False if any call failed.
    template <class Record>
    bool for_each_stream(Record&& record) {
        int current = 0;
        if (cudaGetDevice(&current) != cudaSuccess) return false;
        const std::scoped_lock lock(mutex_);
        bool ok = true;
        int active = current;
        for (const entry& e : streams_) {
            if (e.device != active) {
                if (cudaSetDevice(e.device) != cudaSuccess) {
                    ok = false;
                    continue;
                }
                active = e.device;
            }
            ok = record(e.stream) && ok;
        }
        if (active != current && cudaSetDevice(current) != cudaSuccess) ok = false;
        return record(cudaStream_t{nullptr}) && ok;
    }

    [[nodiscard]] std::size_t size() const {
        const std::scoped_lock lock(mutex_);
        return streams_.size();
    }

private:
    struct entry {
        cudaStream_t stream;
        int device;
    };
    stream_registry() = default;
    mutable std::mutex mutex_;
    std::vector<entry> streams_;
};

// The point, on every registered stream, after all the work enqueued so far: an event on
// each. Made without waiting; passed() asks without waiting; wait() waits for that work only
// (work enqueued after the fence runs on).
class stream_fence {
public:
    // Null when an event could not be made or recorded (the caller then treats the buffer as
    // still in use and frees it the waiting way).
    [[nodiscard]] static stream_fence* record() noexcept {
        auto* fence = new (std::nothrow) stream_fence();
        if (fence == nullptr) return nullptr;
        const bool recorded = stream_registry::instance().for_each_stream([&](cudaStream_t s) {
            cudaEvent_t event = nullptr;
            if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) return false;
            try {
                fence->events_.push_back(event);
            } catch (...) {
                static_cast<void>(cudaEventDestroy(event));
                return false;
            }
            return cudaEventRecord(event, s) == cudaSuccess;
        });
        if (!recorded) {
            delete fence;  // NOLINT(cppcoreguidelines-owning-memory): not handed out
            return nullptr;
        }
        return fence;
    }

    stream_fence(const stream_fence&) = delete;
    stream_fence& operator=(const stream_fence&) = delete;
    ~stream_fence() {
        for (cudaEvent_t e : events_) static_cast<void>(cudaEventDestroy(e));
    }

    // cudaEventQuery on each: cudaErrorNotReady while one has not passed, else the first other
    // error, or cudaSuccess. What a wait polls (weft/exec/cuda/wait_limit.hpp).
    [[nodiscard]] cudaError_t query() const noexcept {
        for (cudaEvent_t e : events_)
            if (const cudaError_t result = cudaEventQuery(e); result != cudaSuccess) return result;
        return cudaSuccess;
    }
    // An error other than "not ready" counts as passed: the device has failed, and the wait
    // or the next operation on it reports that.
    [[nodiscard]] bool passed() const noexcept { return query() != cudaErrorNotReady; }

private:
    stream_fence() = default;
    std::vector<cudaEvent_t> events_;
};

}  // namespace weft::gpu
