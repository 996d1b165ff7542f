// An owned CUDA stream (non-blocking, so it never serialises against the legacy
// default stream) and an owned CUDA event for ordering and timing work on it. Streams are
// registered for their lifetimes (stream_registry.hpp), so that freeing a state buffer can
// fence the work on them instead of waiting for the device.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream_registry.hpp"

namespace weft::gpu {

// Asks for a stream that is left out of the registry's fences (a communicator's: see
// stream_registry.hpp for why it must not be fenced).
struct unfenced_t {
    explicit unfenced_t() = default;
};
inline constexpr unfenced_t unfenced{};

class stream {
public:
    stream() : fenced_(true) {
        check(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        stream_registry::instance().add(handle_);
    }
    explicit stream(unfenced_t) : fenced_(false) {
        check(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;
    stream(stream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), fenced_(other.fenced_) {}
    stream& operator=(stream&& other) noexcept {
        if (this != &other) {
            release();
            handle_ = std::exchange(other.handle_, nullptr);
            fenced_ = other.fenced_;
        }
        return *this;
    }
    ~stream() { release(); }

    [[nodiscard]] cudaStream_t get() const { return handle_; }
    operator cudaStream_t() const { return handle_; }  // NOLINT: used where CUDA takes a stream
    void synchronize() const { check(cudaStreamSynchronize(handle_), "cudaStreamSynchronize"); }

private:
    void release() noexcept {
        if (handle_ != nullptr) {
            if (fenced_) stream_registry::instance().remove(handle_);
            static_cast<void>(cudaStreamDestroy(handle_));
        }
        handle_ = nullptr;
    }
    cudaStream_t handle_ = nullptr;
    bool fenced_ = true;  // in the registry
};

class event {
public:
    event() { check(cudaEventCreate(&handle_), "cudaEventCreate"); }
    event(const event&) = delete;
    event& operator=(const event&) = delete;
    event(event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    event& operator=(event&& other) noexcept {
        if (this != &other) {
            release();
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    ~event() { release(); }

    [[nodiscard]] cudaEvent_t get() const { return handle_; }
    void record(cudaStream_t on) { check(cudaEventRecord(handle_, on), "cudaEventRecord"); }
    void synchronize() const { check(cudaEventSynchronize(handle_), "cudaEventSynchronize"); }
    // Milliseconds from `start` to this event; both must have completed.
    [[nodiscard]] float elapsed_ms_since(const event& start) const {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start.handle_, handle_), "cudaEventElapsedTime");
        return ms;
    }

private:
    void release() noexcept {
        if (handle_ != nullptr) static_cast<void>(cudaEventDestroy(handle_));
        handle_ = nullptr;
    }
    cudaEvent_t handle_ = nullptr;
};

}  // namespace weft::gpu
