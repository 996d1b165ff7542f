// The checks a communicator with device memory space passes on rank threads of comm::local
// (tests/comm/cuda/host_staged_test.cpp, device_direct_test.cpp): the shared communicator
// checks on host buffers, which need no GPU, and every operation on device buffers, each
// result read back to the host, on two rank threads sharing GPU 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "../communicator_checks.hpp"
#include "device_check.hpp"
#include "weft/comm/local.hpp"
#include "weft/gpu/device_buffer.hpp"

namespace weft_test {

// Runs `body(communicator, expectations)` on `n` rank threads, each communicator made by
// `make(world)` from its rank's comm::local, and reports every failure.
template <class Make, class Body>
void on_ranks(int n, const std::string& what, Make&& make, Body&& body) {
    std::mutex lock;
    std::vector<std::string> failures;
    weft::comm::local::run(n, [&](weft::comm::local& world) {
        auto c = make(std::move(world));
        expectations e;
        body(c, e);
        const std::lock_guard guard(lock);
        for (auto& f : e.failures) failures.push_back("rank " + std::to_string(c.rank()) + ": " + f);
    });
    for (const auto& f : failures) expect(false, what + " (" + std::to_string(n) + " ranks): " + f);
    expect(true, what);
}

template <class Make>
void host_buffer_checks(Make&& make) {
    for (const int n : {1, 2, 3}) {
        on_ranks(n, "point to point", make, [](auto& c, auto& e) { check_point_to_point(c, e); });
        on_ranks(n, "fifo per tag", make, [](auto& c, auto& e) { check_fifo_per_tag(c, e); });
        on_ranks(n, "allreduce", make, [](auto& c, auto& e) { check_allreduce(c, e); });
        on_ranks(n, "allgather and reduce_scatter", make,
                 [](auto& c, auto& e) { check_allgather_and_reduce_scatter(c, e); });
        on_ranks(n, "non-blocking collectives", make, [](auto& c, auto& e) { check_nonblocking_collectives(c, e); });
        on_ranks(n, "broadcast", make, [](auto& c, auto& e) { check_broadcast(c, e); });
        on_ranks(n, "split", make, [](auto& c, auto& e) { check_split(c, e); });
        on_ranks(n, "size mismatch", make, [](auto& c, auto& e) { check_size_mismatch(c, e); });
    }
}

inline std::vector<float> iota(std::size_t n, float first) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = first + float(i);
    return v;
}

// Device buffers, two rank threads on GPU 0: each operation's result read back to the host.
template <class Make>
void device_buffer_checks(Make&& make) {
    using device_floats = weft::gpu::device_buffer<float>;
    on_ranks(2, "device buffers", make, [](auto& c, expectations& e) {
        weft::gpu::check(cudaSetDevice(0), "cudaSetDevice");
        const int me = c.rank(), other = 1 - me;
        constexpr std::size_t n = 1000;

        // Point to point, both ways at once.
        device_floats out(std::span<const float>(iota(n, float(100 * me))));
        device_floats in(n);
        auto recv = c.irecv(std::as_writable_bytes(std::span<float>(in.data(), n)), other, 7);
        auto send = c.isend(std::as_bytes(std::span<const float>(out.data(), n)), other, 7);
        send.wait();
        recv.wait();
        e.expect(in.to_host() == iota(n, float(100 * other)), "isend/irecv of device memory");

        // allreduce, blocking and not.
        device_floats sum(std::span<const float>(iota(n, float(me))));
        c.allreduce_sum(std::span<float>(sum.data(), n));
        std::vector<float> want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = float(2 * i + 1);
        e.expect(sum.to_host() == want, "allreduce_sum of device memory");
        device_floats isum(std::span<const float>(iota(n, float(me))));
        auto r = c.iallreduce_sum(std::span<float>(isum.data(), n));
        r.wait();
        e.expect(isum.to_host() == want, "iallreduce_sum of device memory");

        // allgather and reduce_scatter, device input and output.
        device_floats mine(std::span<const float>(iota(n, float(10 * me))));
        device_floats all(2 * n);
        c.allgather(std::span<const float>(mine.data(), n), std::span<float>(all.data(), 2 * n));
        std::vector<float> gathered = iota(n, 0.0f);
        const auto second = iota(n, 10.0f);
        gathered.insert(gathered.end(), second.begin(), second.end());
        e.expect(all.to_host() == gathered, "allgather of device memory");
        device_floats part(n);
        auto rs = c.ireduce_scatter_sum(std::span<const float>(all.data(), 2 * n), std::span<float>(part.data(), n));
        rs.wait();
        std::vector<float> want_part(n);
        for (std::size_t i = 0; i < n; ++i) want_part[i] = 2 * gathered[std::size_t(me) * n + i];
        e.expect(part.to_host() == want_part, "ireduce_scatter_sum of device memory");

        // broadcast from rank 1.
        device_floats b(std::span<const float>(iota(n, float(1000 * me))));
        c.broadcast(std::as_writable_bytes(std::span<float>(b.data(), n)), 1);
        e.expect(b.to_host() == iota(n, 1000.0f), "broadcast of device memory");
    });
}

}  // namespace weft_test
