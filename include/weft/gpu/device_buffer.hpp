// Typed, move-only device memory (cudaMalloc/cudaFree) with checked host<->device copies.
// Host-only code (no kernels), so plain C++ translation units can own GPU buffers too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/gpu/capture_lock.hpp"
#include "weft/gpu/runtime.hpp"

namespace weft::gpu {

template <class T>
class device_buffer {
    static_assert(std::is_trivially_copyable_v<T>, "device_buffer holds trivially copyable elements only");

public:
    device_buffer() = default;

    explicit device_buffer(std::size_t size) : size_(size) {
        if (size_ > 0) {
            void* pointer = nullptr;
            const device_wide_scope no_capture;  // capture_lock.hpp
            check(cudaMalloc(&pointer, bytes()),
                  "cudaMalloc(" + std::to_string(bytes()) + " bytes)");
            data_ = static_cast<T*>(pointer);
        }
    }

    explicit device_buffer(std::span<const T> host) : device_buffer(host.size()) { copy_from_host(host); }

    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    device_buffer(device_buffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    device_buffer& operator=(device_buffer&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }
    ~device_buffer() { release(); }

    [[nodiscard]] T* data() { return data_; }
    [[nodiscard]] const T* data() const { return data_; }
    [[nodiscard]] std::size_t size() const { return size_; }
    [[nodiscard]] std::size_t bytes() const { return size_ * sizeof(T); }
    [[nodiscard]] bool empty() const { return size_ == 0; }

    // Synchronous copies (they wait for the device's work, see below); sizes must match exactly so
    // that a short host vector never leaves stale device data behind.
    void copy_from_host(std::span<const T> host) {
        require_same_size(host.size(), "device_buffer::copy_from_host: host.size()");
        if (size_ > 0) {
            check(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to device");
            // From pageable memory cudaMemcpy returns once the data is staged, possibly before
            // the DMA into data_ is done; that DMA is ordered only on the default stream, so a
            // kernel on a non-blocking weft::gpu::stream could read stale bytes. Wait.
            check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize after cudaMemcpy to device");
        }
    }
    void copy_to_host(std::span<T> host) const {
        require_same_size(host.size(), "device_buffer::copy_to_host: host.size()");
        if (size_ > 0) {
            // cudaMemcpy is ordered on the legacy default stream only, and weft's streams are
            // non-blocking: a kernel still writing data_ on one of them would race the copy
            // (seen on an H200 under compute-sanitizer, which slows kernels enough to lose it).
            // Wait for the whole device first, under the capture lock (a device-wide wait
            // would break another thread's graph capture).
            const device_wide_scope no_capture;
            check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before cudaMemcpy to host");
            check(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
        }
    }
    [[nodiscard]] std::vector<T> to_host() const {
        std::vector<T> host(size_);
        copy_to_host(host);
        return host;
    }
    // Stream-ordered device-to-device copy of the whole buffer (capturable in a CUDA graph).
    void copy_from(const device_buffer& other, cudaStream_t stream = nullptr) {
        require_same_size(other.size(), "device_buffer::copy_from: other.size()");
        if (size_ > 0)
            check(cudaMemcpyAsync(data_, other.data(), bytes(), cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync device to device");
    }
    // Stream-ordered: every byte zero (capturable in a CUDA graph).
    void fill_zero(cudaStream_t stream = nullptr) {
        if (size_ > 0) check(cudaMemsetAsync(data_, 0, bytes(), stream), "cudaMemsetAsync");
    }

private:
    void require_same_size(std::size_t got, std::string_view what) const {
        require(got == size_, what, got, "must equal the buffer's size " + std::to_string(size_));
    }
    void release() noexcept {
        // A failed free in a destructor cannot be reported by throwing; the memory is
        // the driver's to reclaim at exit either way.
        if (data_ != nullptr) free_device_memory(data_);  // under the capture lock
        data_ = nullptr;
        size_ = 0;
    }

    T* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace weft::gpu
