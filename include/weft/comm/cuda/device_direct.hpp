// comm::device_direct<Inner>: a host communicator that moves device memory itself (a
// CUDA-aware MPI: weft/comm/mpi_cuda_support.hpp asks it), given device buffers as they are.
// The middle way between comm::host_staged (any MPI, every device buffer copied through host
// memory) and comm::nccl (stream-ordered, its own streams): no copies, but MPI is not ordered
// with CUDA's streams, so before a device buffer is handed over the whole device is waited
// for (weft/comm/cuda/device_fence.hpp): the kernels that wrote a buffer to be sent, and any
// that still use the memory a receive will fill, have finished. When an operation's wait()
// returns, what it received is in device memory for the kernels queued after.
//
// Unlike host_staged, which copies a send's buffer when it is posted, the MPI reads a device
// buffer until the operation's wait(): it must not be written or freed (cudaFreeAsync is not
// ordered with MPI either) before then. The engine keeps every message buffer until its wait.
//
// The non-blocking collectives (iallreduce_sum, iallgather, ireduce_scatter_sum) on device
// buffers run as their blocking forms and return a completed request: Open MPI takes device
// pointers in point to point and the blocking collectives only (its CUDA FAQ), reducing a
// non-blocking one on the CPU. The engine hands these the training state, which is managed
// memory and goes through non-blocking as it is.
//
// Same-node transfers of stream-ordered pool memory (cudaMallocAsync, where weft's message
// buffers come from) need a UCX that can export such memory over CUDA IPC; older ones fail
// with "cuIpcGetMemHandle failed" (docs/running.md, --gpu-comm cuda-aware-mpi).
//
// Over a communicator that cannot reach device memory (an MPI that is not CUDA-aware,
// comm::local) only host and managed buffers may be given: a device buffer would be read as
// a host address. Whoever makes it checks the inner side first (train_gpt's
// --gpu-comm cuda-aware-mpi does).
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <span>
#include <utility>

#include "weft/comm/communicator.hpp"
#include "weft/comm/cuda/device_fence.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/core/memory_space.hpp"

namespace weft::comm {

template <communicator Inner>
    requires std::default_initializable<typename Inner::request>  // a completed request (see the top)
class device_direct {
public:
    using memory_space = device_space;
    using request = typename Inner::request;
    // The inner communicator pairs the messages, by its own rule.
    static constexpr message_matching matching = matching_of<Inner>;

    explicit device_direct(Inner inner) : inner_(std::move(inner)) {}

    [[nodiscard]] int rank() const { return inner_.rank(); }
    [[nodiscard]] int size() const { return inner_.size(); }
    [[nodiscard]] Inner& inner() { return inner_; }
    // The inner communicator's wait limit (comm/timeout.hpp), where it has one.
    template <class Rep, class Period>
        requires requires(Inner& i, std::chrono::duration<Rep, Period> t) { i.set_timeout(t); }
    void set_timeout(std::chrono::duration<Rep, Period> timeout) {
        inner_.set_timeout(timeout);
    }
    [[nodiscard]] auto timeout() const
        requires requires(const Inner& i) { i.timeout(); }
    {
        return inner_.timeout();
    }

    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        fence(data.data());
        return inner_.isend(data, dest, tag);
    }
    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        fence(buffer.data());
        return inner_.irecv(buffer, source, tag);
    }

    template <class T>
    void allreduce_sum(std::span<T> values) {
        fence(values.data());
        inner_.allreduce_sum(values);
    }
    template <class T>
    void allgather(std::span<const T> mine, std::span<T> all) {
        fence(mine.data(), all.data());
        inner_.allgather(mine, all);
    }
    template <class T>
    void reduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        fence(all.data(), mine.data());
        inner_.reduce_scatter_sum(all, mine);
    }
    void broadcast(std::span<std::byte> bytes, int root) {
        fence(bytes.data());
        inner_.broadcast(bytes, root);
    }
    void barrier() { inner_.barrier(); }

    // On device buffers, the blocking forms and a completed request (see the top).
    template <class T>
    [[nodiscard]] request iallreduce_sum(std::span<T> values) {
        if (!fence(values.data())) return inner_.iallreduce_sum(values);
        inner_.allreduce_sum(values);
        return request{};
    }
    template <class T>
    [[nodiscard]] request iallgather(std::span<const T> mine, std::span<T> all) {
        if (!fence(mine.data(), all.data())) return inner_.iallgather(mine, all);
        inner_.allgather(mine, all);
        return request{};
    }
    template <class T>
    [[nodiscard]] request ireduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        if (!fence(all.data(), mine.data())) return inner_.ireduce_scatter_sum(all, mine);
        inner_.reduce_scatter_sum(all, mine);
        return request{};
    }

    [[nodiscard]] device_direct split(int color, int key) { return device_direct(inner_.split(color, key)); }

private:
    // Host and managed buffers go as they are; a device buffer waits for the device first.
    // Returns whether one of the buffers is device memory.
    static bool fence(const void* a, const void* b = nullptr) {
        const bool device = detail::is_device_only(a) || (b != nullptr && detail::is_device_only(b));
        if (device)
            detail::finish_device_work("cudaDeviceSynchronize (device_direct, before handing device memory to MPI)");
        return device;
    }

    Inner inner_;
};

}  // namespace weft::comm
