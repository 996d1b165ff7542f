// comm::host_staged<Inner>: a host communicator (comm::local, comm::mpi) made to move device
// memory by copying it through host memory: the fallback for GPUs without NCCL between them
// (two rank threads on one GPU, where NCCL refuses a second rank per device) and for MPI
// builds that are not CUDA-aware. Its memory space is the device's, so an engine over
// exec::cuda composes with it.
//
// Every buffer is looked at once (cudaPointerGetAttributes): device memory is staged, host
// and managed memory (the engine's training state) go to the inner communicator as they are.
// Before staging a device buffer down, the whole device is synchronized, so the kernels that
// wrote it on any stream have finished; a staged receive is copied up when its request is
// waited for, and is on the device before wait() returns. Correct, and slower than NCCL by
// the copies and the waits: the fallback, not the fast path.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/cuda/device_fence.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/gpu/runtime.hpp"

namespace weft::comm {

namespace detail {

inline void copy_down(void* host, const void* device, std::size_t bytes) {
    if (bytes == 0) return;
    finish_device_work("cudaDeviceSynchronize (host_staged, before staging down)");  // whoever wrote `device`
    gpu::check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (host_staged, device to host)");
}

inline void copy_up(void* device, const void* host, std::size_t bytes) {
    if (bytes == 0) return;
    gpu::check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (host_staged, host to device)");
    // From pageable memory the copy may still be in flight when cudaMemcpy returns, ordered only
    // on the legacy stream: wait, so the kernels that read it next (on any stream) see it.
    gpu::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (host_staged, after staging up)");
}

}  // namespace detail

template <communicator Inner>
class host_staged {
public:
    using memory_space = device_space;
    // The inner communicator pairs the messages, by its own rule.
    static constexpr message_matching matching = matching_of<Inner>;

    // A staged operation's host buffers: its result, copied up to `copy_back_to` at wait()
    // (none for sends), and its input, kept until the inner operation is done with it.
    class request {
    public:
        request() = default;
        request(typename Inner::request inner, std::unique_ptr<std::vector<std::byte>> host, void* copy_back_to,
                std::unique_ptr<std::vector<std::byte>> input = nullptr)
            : input_(std::move(input)), host_(std::move(host)), copy_back_to_(copy_back_to), inner_(std::move(inner)) {}
        request(request&&) noexcept = default;
        // The old inner operation is replaced (and so cancelled) before its buffers go.
        request& operator=(request&& other) noexcept {
            if (this != &other) {
                inner_ = std::move(other.inner_);
                input_ = std::move(other.input_);
                host_ = std::move(other.host_);
                copy_back_to_ = std::exchange(other.copy_back_to_, nullptr);
            }
            return *this;
        }
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        ~request() = default;

        // Completes the inner operation, then copies a staged result up. Waiting again, or
        // on a moved-from request, does nothing.
        void wait() {
            inner_.wait();
            if (host_ && copy_back_to_ != nullptr) detail::copy_up(copy_back_to_, host_->data(), host_->size());
            host_.reset();
            input_.reset();
            copy_back_to_ = nullptr;
        }

    private:
        // Declared before inner_, so they outlive the inner operation that reads or fills them.
        std::unique_ptr<std::vector<std::byte>> input_;
        std::unique_ptr<std::vector<std::byte>> host_;
        void* copy_back_to_ = nullptr;
        typename Inner::request inner_;
    };

    explicit host_staged(Inner inner) : inner_(std::move(inner)) {}

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
        if (!detail::is_device_only(data.data())) return request(inner_.isend(data, dest, tag), nullptr, nullptr);
        auto host = std::make_unique<std::vector<std::byte>>(data.size());
        detail::copy_down(host->data(), data.data(), data.size());
        auto inner = inner_.isend(std::span<const std::byte>(*host), dest, tag);
        return request(std::move(inner), std::move(host), nullptr);
    }

    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        if (!detail::is_device_only(buffer.data()))
            return request(inner_.irecv(buffer, source, tag), nullptr, nullptr);
        auto host = std::make_unique<std::vector<std::byte>>(buffer.size());
        auto inner = inner_.irecv(std::span<std::byte>(*host), source, tag);
        return request(std::move(inner), std::move(host), buffer.data());
    }

    template <class T>
    void allreduce_sum(std::span<T> values) {
        staged_in_place(values, [&](std::span<T> host) { inner_.allreduce_sum(host); });
    }
    template <class T>
    void allgather(std::span<const T> mine, std::span<T> all) {
        staged_pair(mine, all, [&](std::span<const T> m, std::span<T> a) { inner_.allgather(m, a); });
    }
    template <class T>
    void reduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        staged_pair(all, mine, [&](std::span<const T> a, std::span<T> m) { inner_.reduce_scatter_sum(a, m); });
    }
    void broadcast(std::span<std::byte> bytes, int root) {
        staged_in_place(bytes, [&](std::span<std::byte> host) { inner_.broadcast(host, root); });
    }
    void barrier() { inner_.barrier(); }

    template <class T>
    [[nodiscard]] request iallreduce_sum(std::span<T> values) {
        if (!detail::is_device_only(values.data())) return request(inner_.iallreduce_sum(values), nullptr, nullptr);
        auto host = staged_copy(std::span<const T>(values));
        auto inner = inner_.iallreduce_sum(typed<T>(*host));
        return request(std::move(inner), std::move(host), values.data());
    }
    template <class T>
    [[nodiscard]] request iallgather(std::span<const T> mine, std::span<T> all) {
        return staged_ipair(mine, all, [&](std::span<const T> m, std::span<T> a) { return inner_.iallgather(m, a); });
    }
    template <class T>
    [[nodiscard]] request ireduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        return staged_ipair(all, mine,
                            [&](std::span<const T> a, std::span<T> m) { return inner_.ireduce_scatter_sum(a, m); });
    }

    [[nodiscard]] host_staged split(int color, int key) { return host_staged(inner_.split(color, key)); }

private:
    template <class T>
    static std::span<T> typed(std::vector<std::byte>& bytes) {
        return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
    }
    // A host copy of `values`, which may be device memory.
    template <class T>
    static std::unique_ptr<std::vector<std::byte>> staged_copy(std::span<const T> values) {
        auto host = std::make_unique<std::vector<std::byte>>(values.size_bytes());
        if (detail::is_device_only(values.data()))
            detail::copy_down(host->data(), values.data(), values.size_bytes());
        else if (!values.empty())
            std::memcpy(host->data(), values.data(), values.size_bytes());
        return host;
    }

    template <class T, class Op>
    void staged_in_place(std::span<T> values, Op&& op) {
        if (!detail::is_device_only(values.data())) return op(values);
        auto host = staged_copy(std::span<const T>(values));
        op(typed<T>(*host));
        detail::copy_up(values.data(), host->data(), host->size());
    }

    template <class T, class Op>
    void staged_pair(std::span<const T> in, std::span<T> out, Op&& op) {
        const bool stage_in = detail::is_device_only(in.data()), stage_out = detail::is_device_only(out.data());
        if (!stage_in && !stage_out) return op(in, out);
        auto host_in = staged_copy(in);
        std::vector<std::byte> host_out(out.size_bytes());
        op(std::span<const T>(typed<T>(*host_in)), typed<T>(host_out));
        if (stage_out)
            detail::copy_up(out.data(), host_out.data(), host_out.size());
        else if (!out.empty())
            std::memcpy(out.data(), host_out.data(), host_out.size());
    }

    template <class T, class Op>
    request staged_ipair(std::span<const T> in, std::span<T> out, Op&& op) {
        const bool stage_in = detail::is_device_only(in.data()), stage_out = detail::is_device_only(out.data());
        if (!stage_in && !stage_out) return request(op(in, out), nullptr, nullptr);
        auto host_in = staged_copy(in);
        const std::span<const T> staged_in = typed<T>(*host_in);
        if (!stage_out) {
            auto inner = op(staged_in, out);  // host output: the inner operation writes it directly
            return request(std::move(inner), nullptr, nullptr, std::move(host_in));
        }
        auto host_out = std::make_unique<std::vector<std::byte>>(out.size_bytes());
        auto inner = op(staged_in, typed<T>(*host_out));
        return request(std::move(inner), std::move(host_out), out.data(), std::move(host_in));
    }

    Inner inner_;
};

}  // namespace weft::comm
