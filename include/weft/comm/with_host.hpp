// comm::with_host<Device, Host>: a device communicator (comm::nccl) paired with a host
// communicator over the same ranks (comm::mpi), so that an engine can train over the one
// and still checkpoint and switch layouts.
//
// It is the device communicator: its memory space, message matching, requests and every
// operation are the device's, so the engine's pipeline messages and collectives run there.
// The host communicator serves comm::host_side (comm/host_side.hpp): the protocols that send
// host memory point to point and read it on the host after wait() (checkpoints, layout
// switches), which a device communicator cannot carry. split() splits both alike, so every
// group the engine makes keeps its host side.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <utility>

#include "weft/comm/communicator.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

template <communicator Device, communicator Host>
class with_host {
public:
    using memory_space = typename Device::memory_space;
    using request = typename Device::request;
    static constexpr message_matching matching = matching_of<Device>;

    // Both over the same processes, in the same order.
    with_host(Device device, Host host) : device_(std::move(device)), host_(std::move(host)) {
        require(host_.size() == device_.size(), "host communicator size", host_.size(),
                "must equal the device communicator's size, " + std::to_string(device_.size()) +
                    " (both span the same ranks)");
        require(host_.rank() == device_.rank(), "host communicator rank", host_.rank(),
                "must equal the device communicator's rank, " + std::to_string(device_.rank()) +
                    " (both number the ranks alike)");
    }

    [[nodiscard]] int rank() const { return device_.rank(); }
    [[nodiscard]] int size() const { return device_.size(); }
    [[nodiscard]] Device& device() { return device_; }
    [[nodiscard]] Host& host() { return host_; }

    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        return device_.isend(data, dest, tag);
    }
    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        return device_.irecv(buffer, source, tag);
    }

    template <class T>
    void allreduce_sum(std::span<T> values) {
        device_.allreduce_sum(values);
    }
    template <class T>
    void allgather(std::span<const T> mine, std::span<T> all) {
        device_.allgather(mine, all);
    }
    template <class T>
    void reduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        device_.reduce_scatter_sum(all, mine);
    }
    template <class T>
    [[nodiscard]] request iallreduce_sum(std::span<T> values) {
        return device_.iallreduce_sum(values);
    }
    template <class T>
    [[nodiscard]] request iallgather(std::span<const T> mine, std::span<T> all) {
        return device_.iallgather(mine, all);
    }
    template <class T>
    [[nodiscard]] request ireduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        return device_.ireduce_scatter_sum(all, mine);
    }
    void broadcast(std::span<std::byte> bytes, int root) { device_.broadcast(bytes, root); }
    void barrier() { device_.barrier(); }

    [[nodiscard]] with_host split(int color, int key) {
        return with_host(device_.split(color, key), host_.split(color, key));
    }

    // Both sides give up on a peer after the same time, where they can.
    template <class Rep, class Period>
    void set_timeout(std::chrono::duration<Rep, Period> timeout) {
        if constexpr (requires { device_.set_timeout(timeout); }) device_.set_timeout(timeout);
        if constexpr (requires { host_.set_timeout(timeout); }) host_.set_timeout(timeout);
    }
    // The device side's: what the engine bounds its backend's waits with.
    [[nodiscard]] auto timeout() const
        requires requires(const Device& d) { d.timeout(); }
    {
        return device_.timeout();
    }
    // Launches the device's pending sends and receives (comm::nccl batches them): the
    // pipeline launches each as it posts it (train/program_loop.hpp).
    void flush()
        requires requires(Device& d) { d.flush(); }
    {
        device_.flush();
    }
    // The device's operations order after this stream (comm::nccl; see the engine's binding).
    template <class Stream>
        requires requires(Device& d, Stream s) { d.set_compute_stream(s); }
    void set_compute_stream(Stream stream) {
        device_.set_compute_stream(stream);
    }

private:
    Device device_;
    Host host_;
};

}  // namespace weft::comm
