// The CUDA backend's matrix: a row-major [rows, cols] bf16 array in device memory, what
// exec::cuda's kernels take and return as Eigen matrices are the CPU backend's. Activations
// and their gradients are bf16 (half the memory and bandwidth of fp32, and what the tensor
// cores read); the kernels compute in fp32, and the weights and gradients they update stay
// fp32 in the training state.
//
// Memory is stream-ordered (cudaMallocAsync / cudaFreeAsync from the device's pool) on the
// allocating thread's compute stream (allocation_stream below), which the CUDA backend sets
// when it is made: a matrix freed after the kernels that read it were queued gives its
// memory back in stream order, so a training step allocates without synchronizing and the
// pool keeps the memory for the next micro-batch. Without a stream set, plain cudaMalloc.
// Inside an action recorded into a CUDA graph, allocations are the graph's
// (weft/exec/cuda/stream_memory.hpp).
//
// Host-only code (no kernels): plain C++ translation units hold and move these matrices.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/action_recording.hpp"
#include "weft/exec/cuda/stream_memory.hpp"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

namespace detail {
inline thread_local cudaStream_t allocation_stream_of_thread = nullptr;
}  // namespace detail

// The stream this thread's device matrices are allocated and freed on.
[[nodiscard]] inline cudaStream_t allocation_stream() { return detail::allocation_stream_of_thread; }
inline void set_allocation_stream(cudaStream_t stream) { detail::allocation_stream_of_thread = stream; }

class device_matrix {
public:
    using value_type = __nv_bfloat16;

    device_matrix() = default;
    // Uninitialized, as Eigen's (rows, cols) constructor: whoever makes one writes all of it.
    device_matrix(int rows, int cols) : rows_(rows), cols_(cols) {
        require(rows >= 0, "device_matrix: rows", rows, "must not be negative");
        require(cols >= 0, "device_matrix: cols", cols, "must not be negative");
        const std::size_t bytes = size() * sizeof(value_type);
        if (bytes == 0) return;
        stream_ = allocation_stream();
        const stream_allocation memory = allocate_on_stream(bytes, stream_);
        data_ = static_cast<value_type*>(memory.pointer);
        in_graph_ = memory.in_graph;
    }

    // A deep copy, queued on this thread's allocation stream (layers keep copies of their
    // inputs, as they do of Eigen matrices).
    device_matrix(const device_matrix& other) : device_matrix(other.rows_, other.cols_) {
        if (size() == 0) return;
        const std::size_t bytes = size() * sizeof(value_type);
        if (skip_recorded_work("device_matrix copy", data_, other.data_, bytes)) return;
        gpu::check(cudaMemcpyAsync(data_, other.data_, bytes, cudaMemcpyDeviceToDevice, stream_),
              "cudaMemcpyAsync (device_matrix copy)");
    }
    device_matrix& operator=(const device_matrix& other) {
        if (this != &other) *this = device_matrix(other);
        return *this;
    }
    device_matrix(device_matrix&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)),
          rows_(std::exchange(other.rows_, 0)),
          cols_(std::exchange(other.cols_, 0)),
          stream_(std::exchange(other.stream_, nullptr)),
          in_graph_(std::exchange(other.in_graph_, false)),
          owns_(std::exchange(other.owns_, true)) {}
    device_matrix& operator=(device_matrix&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            rows_ = std::exchange(other.rows_, 0);
            cols_ = std::exchange(other.cols_, 0);
            stream_ = std::exchange(other.stream_, nullptr);
            in_graph_ = std::exchange(other.in_graph_, false);
            owns_ = std::exchange(other.owns_, true);
        }
        return *this;
    }
    ~device_matrix() { release(); }

    // A matrix over this one's memory that never frees it: what an action's graph hands its
    // layers as the input it copied into a buffer of its own (exec::cuda::run_action). It
    // must not outlive this one; a copy of it is an owning deep copy.
    [[nodiscard]] device_matrix view() const {
        device_matrix v;
        v.data_ = data_;
        v.rows_ = rows_;
        v.cols_ = cols_;
        v.owns_ = false;
        return v;
    }

    // Device pointers: for kernels and device-memory communicators, never for host code.
    [[nodiscard]] value_type* data() { return data_; }
    [[nodiscard]] const value_type* data() const { return data_; }
    [[nodiscard]] std::size_t size() const { return std::size_t(rows_) * std::size_t(cols_); }
    [[nodiscard]] int rows() const { return rows_; }
    [[nodiscard]] int cols() const { return cols_; }

private:
    void release() noexcept {
        // A failed free in a destructor cannot be reported by throwing; the pool or the driver
        // reclaims the memory at exit either way.
        if (owns_) free_on_stream({data_, in_graph_}, stream_);
        data_ = nullptr;
        rows_ = cols_ = 0;
        stream_ = nullptr;
        in_graph_ = false;
        owns_ = true;
    }

    value_type* data_ = nullptr;
    int rows_ = 0;
    int cols_ = 0;
    cudaStream_t stream_ = nullptr;  // where it was allocated and is freed
    bool in_graph_ = false;          // allocated by an action's graph (stream_memory.hpp)
    bool owns_ = true;               // false for a view()
};

}  // namespace weft::exec::cuda_detail
