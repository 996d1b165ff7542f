// comm::nccl on device memory: collectives, their non-blocking forms, point to point,
// split, the stream/event ordering and the argument errors; and collectives on host memory,
// staged through the device. Built as test_comm_nccl (one
// GPU, a 1-rank communicator from nccl::single) and, with MPI, test_comm_nccl_mpi (one
// rank per GPU under mpiexec, nccl::from_mpi). Without a GPU both exit 77 (skipped).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "../../exec/cuda/device_check.hpp"
#include "weft/comm/abort_on_timeout.hpp"
#include "weft/comm/nccl.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/gpu/device_buffer.hpp"
#include "weft/gpu/stream.hpp"
#include "weft/gpu/stream_registry.hpp"

#if defined(WEFT_NCCL_TEST_MPI)
#include <mpi.h>

#include "weft/comm/mpi.hpp"
#endif

namespace gpu = weft::gpu;
using weft::comm::nccl;
using weft_test::expect;

static_assert(weft::communicator<nccl>);
// Device buffers: an engine pairing nccl with the host-memory exec::cpu does not compile.
static_assert(std::is_same_v<nccl::memory_space, weft::device_space>);
static_assert(!std::is_copy_constructible_v<nccl>);
static_assert(!std::is_copy_constructible_v<nccl::request>);
static_assert(std::is_nothrow_move_constructible_v<nccl::request>);

namespace {

template <class Fn>
void expect_error(Fn&& fn, const std::string& what, std::initializer_list<std::string> mentions = {}) {
    try {
        fn();
        expect(false, what + ": no weft::error thrown");
    } catch (const weft::error& e) {
        const std::string message = e.what();
        bool all = true;
        for (const std::string& m : mentions) all = all && message.find(m) != std::string::npos;
        expect(all, what + ": message \"" + message + "\" lacks an expected word");
    }
}

template <class T>
std::span<T> span_of(gpu::device_buffer<T>& b) {
    return {b.data(), b.size()};
}
template <class T>
std::span<const T> cspan_of(const gpu::device_buffer<T>& b) {
    return {b.data(), b.size()};
}
template <class T>
std::span<std::byte> bytes_of(gpu::device_buffer<T>& b) {
    return std::as_writable_bytes(span_of(b));
}

template <class T>
gpu::device_buffer<T> filled(std::size_t n, T value) {
    const std::vector<T> host(n, value);
    return gpu::device_buffer<T>(std::span<const T>(host));
}

// After the compute stream has caught up, the buffer as the compute stream sees it.
template <class T>
std::vector<T> read(const gpu::device_buffer<T>& b, cudaStream_t compute) {
    gpu::check(cudaStreamSynchronize(compute), "cudaStreamSynchronize (compute)");
    return b.to_host();
}

// Holds `stream` for 50 ms (a host function on it), so that work enqueued after it runs late
// and a missing stream dependency shows as wrong data rather than a lucky race.
void delay(cudaStream_t stream) {
    gpu::check(cudaLaunchHostFunc(
                    stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }, nullptr),
                "cudaLaunchHostFunc");
}

// ---- checks valid for any number of ranks -----------------------------------------------

template <class T>
void check_collectives_of(nccl& c, cudaStream_t compute, const std::string& type) {
    const int n = c.size();
    const int r = c.rank();
    const auto un = static_cast<std::size_t>(n);
    // Small dyadic values: every sum is exact in any order.
    auto value = [](int rank, std::size_t i) { return static_cast<T>(rank + 1) * T(0.5) + static_cast<T>(i) * T(0.25); };

    std::vector<T> host(37);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = value(r, i);
    gpu::device_buffer<T> values{std::span<const T>(host)};
    c.allreduce_sum(span_of(values));
    std::vector<T> got = read(values, compute);
    bool ok = true;
    for (std::size_t i = 0; i < got.size(); ++i) {
        T expected = 0;
        for (int q = 0; q < n; ++q) expected += value(q, i);
        ok = ok && got[i] == expected;
    }
    expect(ok, type + " allreduce_sum is the sum over ranks");

    constexpr std::size_t k = 5;
    std::vector<T> mine_host(k);
    for (std::size_t i = 0; i < k; ++i) mine_host[i] = static_cast<T>(r * 100) + static_cast<T>(i);
    gpu::device_buffer<T> mine{std::span<const T>(mine_host)};
    auto all = filled<T>(un * k, T(-1));
    c.allgather(cspan_of(mine), span_of(all));
    got = read(all, compute);
    ok = true;
    for (int q = 0; q < n; ++q)
        for (std::size_t i = 0; i < k; ++i) ok = ok && got[static_cast<std::size_t>(q) * k + i] == static_cast<T>(q * 100) + static_cast<T>(i);
    expect(ok, type + " allgather puts rank q's block at [q*k, (q+1)*k)");

    // In place: mine is this rank's block of all.
    std::vector<T> in_place_host(un * k, T(-1));
    for (std::size_t i = 0; i < k; ++i) in_place_host[static_cast<std::size_t>(r) * k + i] = mine_host[i];
    gpu::device_buffer<T> in_place{std::span<const T>(in_place_host)};
    std::span<T> whole = span_of(in_place);
    c.allgather(std::span<const T>(whole.subspan(static_cast<std::size_t>(r) * k, k)), whole);
    expect(read(in_place, compute) == got, type + " allgather in place equals the out-of-place result");

    std::vector<T> all_host(un * k);
    for (std::size_t j = 0; j < all_host.size(); ++j) all_host[j] = static_cast<T>(r) + static_cast<T>(j);
    gpu::device_buffer<T> full{std::span<const T>(all_host)};
    auto block = filled<T>(k, T(-1));
    c.reduce_scatter_sum(cspan_of(full), span_of(block));
    got = read(block, compute);
    ok = true;
    for (std::size_t i = 0; i < k; ++i) {
        T expected = 0;
        for (int q = 0; q < n; ++q) expected += static_cast<T>(q) + static_cast<T>(static_cast<std::size_t>(r) * k + i);
        ok = ok && got[i] == expected;
    }
    expect(ok, type + " reduce_scatter_sum gives this rank the sum of block rank()");
    const std::vector<T> scattered = got;

    // Non-blocking: three started back to back, waited for in reverse.
    gpu::device_buffer<T> values2{std::span<const T>(host)};
    auto all2 = filled<T>(un * k, T(-1));
    auto block2 = filled<T>(k, T(-1));
    auto a = c.iallreduce_sum(span_of(values2));
    auto g = c.iallgather(cspan_of(mine), span_of(all2));
    auto s = c.ireduce_scatter_sum(cspan_of(full), span_of(block2));
    s.wait();
    g.wait();
    a.wait();
    a.wait();  // twice is harmless
    expect(read(values2, compute) == read(values, compute), type + " iallreduce_sum equals allreduce_sum");
    expect(read(all2, compute) == read(all, compute), type + " iallgather equals allgather");
    expect(read(block2, compute) == scattered, type + " ireduce_scatter_sum equals reduce_scatter_sum");

    gpu::device_buffer<T> none;
    c.allreduce_sum(span_of(none));  // empty collectives are fine
    c.allgather(cspan_of(none), span_of(none));
}

void check_collectives(nccl& c, cudaStream_t compute) {
    check_collectives_of<float>(c, compute, "float");
    check_collectives_of<double>(c, compute, "double");

    for (int root = 0; root < c.size(); ++root) {
        std::vector<unsigned char> host(13);
        for (std::size_t i = 0; i < host.size(); ++i)
            host[i] = static_cast<unsigned char>(c.rank() == root ? root * 16 + static_cast<int>(i) : 255);
        gpu::device_buffer<unsigned char> data{std::span<const unsigned char>(host)};
        c.broadcast(bytes_of(data), root);
        const auto got = read(data, compute);
        bool ok = true;
        for (std::size_t i = 0; i < got.size(); ++i) ok = ok && got[i] == static_cast<unsigned char>(root * 16 + static_cast<int>(i));
        expect(ok, "broadcast from root " + std::to_string(root));
    }
    c.barrier();
}

// Ring exchange: posted receive-first and send-first on alternate rounds; two messages per
// peer arrive in posting order.
void check_point_to_point(nccl& c, cudaStream_t compute) {
    const int n = c.size();
    const int next = (c.rank() + 1) % n;
    const int prev = (c.rank() + n - 1) % n;
    for (int round = 0; round < 2; ++round) {
        auto out1 = filled<int>(4, c.rank() * 10 + 1);
        auto out2 = filled<int>(6, c.rank() * 10 + 2);
        auto in1 = filled<int>(4, -1);
        auto in2 = filled<int>(6, -1);
        std::vector<nccl::request> requests;
        if (round == 0) {
            requests.push_back(c.irecv(bytes_of(in1), prev, 3));
            requests.push_back(c.irecv(bytes_of(in2), prev, 3));
            requests.push_back(c.isend(std::as_bytes(cspan_of(out1)), next, 3));
            requests.push_back(c.isend(std::as_bytes(cspan_of(out2)), next, 3));
        } else {
            requests.push_back(c.isend(std::as_bytes(cspan_of(out1)), next, 7));
            requests.push_back(c.isend(std::as_bytes(cspan_of(out2)), next, 7));
            requests.push_back(c.irecv(bytes_of(in1), prev, 7));
            requests.push_back(c.irecv(bytes_of(in2), prev, 7));
        }
        for (auto it = requests.rbegin(); it != requests.rend(); ++it) it->wait();
        expect(read(in1, compute) == std::vector<int>(4, prev * 10 + 1) &&
                   read(in2, compute) == std::vector<int>(6, prev * 10 + 2),
               "ring round " + std::to_string(round) + ": both messages from the previous rank, in order");
    }
    // Empty messages are fine.
    auto empty_recv = c.irecv({}, prev, 4);
    auto empty_send = c.isend({}, next, 4);
    empty_send.wait();
    empty_recv.wait();
}

// Even and odd ranks, ordered by descending rank.
void check_split(nccl& c, cudaStream_t compute) {
    const int n = c.size();
    const int r = c.rank();
    const std::size_t fenced_streams = weft::gpu::stream_registry::instance().size();
    nccl sub = c.split(r % 2, -r);
    // Its comm stream holds receives posted ahead: the state memory's fences must not wait
    // for it (weft/gpu/stream_registry.hpp).
    expect(weft::gpu::stream_registry::instance().size() == fenced_streams,
           "a communicator's stream is not among the streams the state memory fences");
    std::vector<int> members;
    for (int q = n - 1; q >= 0; --q)
        if (q % 2 == r % 2) members.push_back(q);
    int expected_rank = 0;
    while (members[static_cast<std::size_t>(expected_rank)] != r) ++expected_rank;
    expect(sub.size() == static_cast<int>(members.size()) && sub.rank() == expected_rank,
           "split: group size and rank ordered by key");
    expect(sub.device() == c.device() && sub.compute_stream() == c.compute_stream() &&
               sub.comm_stream() != c.comm_stream(),
           "split: same device and compute stream, its own comm stream");
    auto sum = filled<double>(1, static_cast<double>(r));
    sub.allreduce_sum(span_of(sum));
    double expected = 0;
    for (const int q : members) expected += q;
    expect(read(sum, compute)[0] == expected, "split: allreduce sums only the group's members");
    sub.barrier();
}

// ---- checks for the 1-rank communicator -------------------------------------------------

void check_stream_order(nccl& c, cudaStream_t compute) {
    constexpr std::size_t k = 1024;
    const std::size_t nk = k * static_cast<std::size_t>(c.size());
    // The comm stream waits for the compute stream: the allgather must see the memset
    // enqueued (late) on the compute stream before it was called.
    auto mine = filled<float>(k, 7.0f);
    auto all = filled<float>(nk, 9.0f);
    delay(compute);
    gpu::check(cudaMemsetAsync(mine.data(), 0, mine.bytes(), compute), "cudaMemsetAsync");
    c.allgather(cspan_of(mine), span_of(all));
    expect(read(all, compute) == std::vector<float>(nk, 0.0f), "the collective ran after earlier compute-stream work");

    // wait(): work enqueued on the compute stream afterwards sees the result, even when
    // the comm stream is late.
    auto ones = filled<float>(k, 1.0f);
    auto all2 = filled<float>(nk, 9.0f);
    auto copy = filled<float>(nk, 5.0f);
    delay(c.comm_stream());
    auto g = c.iallgather(cspan_of(ones), span_of(all2));
    g.wait();
    gpu::check(cudaMemcpyAsync(copy.data(), all2.data(), all2.bytes(), cudaMemcpyDeviceToDevice, compute),
                "cudaMemcpyAsync");
    expect(read(copy, compute) == std::vector<float>(nk, 1.0f), "request.wait() orders the compute stream after it");

    // synchronize(): the host may read right after it (cudaMemcpy on the legacy stream does
    // not wait for the non-blocking comm stream).
    auto all3 = filled<float>(nk, 9.0f);
    delay(c.comm_stream());
    auto h = c.iallgather(cspan_of(ones), span_of(all3));
    h.synchronize();
    // A bare cudaMemcpy, not to_host(): that waits for the whole device, which would hide a
    // synchronize() that returned early.
    std::vector<float> after_synchronize(nk);
    gpu::check(cudaMemcpy(after_synchronize.data(), all3.data(), all3.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    expect(after_synchronize == std::vector<float>(nk, 1.0f), "request.synchronize() blocks until done");

    // A different compute stream, set later, is the one later operations order after.
    gpu::stream other;
    c.set_compute_stream(other);
    expect(c.compute_stream() == other.get(), "set_compute_stream");
    auto x = filled<float>(k, 3.0f);
    auto all4 = filled<float>(nk, 9.0f);
    delay(other);
    gpu::check(cudaMemsetAsync(x.data(), 0, x.bytes(), other), "cudaMemsetAsync");
    c.allgather(cspan_of(x), span_of(all4));
    expect(read(all4, other) == std::vector<float>(nk, 0.0f), "the operation ordered after the new compute stream");
    c.set_compute_stream(compute);
}

void check_self_messages(nccl& c, cudaStream_t compute) {
    const int self = c.rank();
    // To itself, in one batch (the batch is enqueued as one NCCL group at the first wait).
    auto out = filled<int>(8, 42);
    auto in = filled<int>(8, -1);
    auto recv = c.irecv(bytes_of(in), self, 1);
    auto send = c.isend(std::as_bytes(cspan_of(out)), self, 1);
    send.wait();
    recv.wait();
    expect(read(in, compute) == std::vector<int>(8, 42), "send to itself arrives");

    // No tags in NCCL: per peer, receives match sends in posting order whatever the tag.
    auto a = filled<int>(3, 1);
    auto b = filled<int>(3, 2);
    auto first = filled<int>(3, -1);
    auto second = filled<int>(3, -1);
    auto s1 = c.isend(std::as_bytes(cspan_of(a)), self, 10);
    auto s2 = c.isend(std::as_bytes(cspan_of(b)), self, 20);
    auto r1 = c.irecv(bytes_of(first), self, 20);
    auto r2 = c.irecv(bytes_of(second), self, 10);
    c.flush();
    r1.synchronize();
    r2.synchronize();
    expect(first.to_host() == std::vector<int>(3, 1) && second.to_host() == std::vector<int>(3, 2),
           "tags do not select: the first receive gets the first send");
    s1.wait();
    s2.wait();

    // A send to itself waited for before its receive was posted would hang NCCL: an error.
    auto lonely = c.isend(std::as_bytes(cspan_of(out)), self, 2);
    expect_error([&] { lonely.wait(); }, "isend to itself without an irecv in the batch", {"no matching irecv", "isend"});
    expect_error([&] { lonely.wait(); }, "waiting on a request of a failed batch", {"never started"});
    auto small = filled<int>(4, -1);
    auto r = c.irecv(bytes_of(small), self, 2);
    auto s = c.isend(std::as_bytes(cspan_of(out)), self, 2);
    expect_error([&] { r.wait(); }, "self message of another size", {"16 bytes", "32 bytes"});
    // The communicator still works after those errors.
    auto v = filled<float>(3, 2.5f);
    c.allreduce_sum(span_of(v));
    expect(read(v, compute) == std::vector<float>(3, 2.5f), "usable after a failed batch");
}

void check_errors(nccl& c) {
    const int n = c.size();
    const auto un = static_cast<std::size_t>(n);
    auto buffer = filled<std::byte>(16, std::byte{0});
    const std::span<const std::byte> data = cspan_of(buffer);
    expect_error([&] { (void)c.isend(data, 0, -1); }, "negative tag", {"tag = -1", "32767"});
    expect_error([&] { (void)c.irecv(bytes_of(buffer), 0, 32768); }, "tag above max_tag", {"tag = 32768"});
    expect_error([&] { (void)c.isend(data, n, 0); }, "dest out of range", {"dest = " + std::to_string(n)});
    expect_error([&] { (void)c.irecv(bytes_of(buffer), -1, 0); }, "source out of range", {"source = -1"});
    expect_error([&] { c.broadcast(bytes_of(buffer), n); }, "broadcast root out of range", {"root = " + std::to_string(n)});
    expect_error([&] { (void)c.split(-1, 0); }, "negative color", {"color = -1"});

    auto mine = filled<float>(4, 1.0f);
    auto all = filled<float>(4 * un + 2, 0.0f);
    const std::string wrong = "all.size() = " + std::to_string(4 * un + 2);
    expect_error([&] { c.allgather(cspan_of(mine), span_of(all)); }, "allgather with all.size() != size*mine.size()",
                 {wrong, "size() * mine.size()"});
    expect_error([&] { (void)c.iallgather(cspan_of(mine), span_of(all)); }, "iallgather size mismatch", {"all.size()"});
    expect_error([&] { c.reduce_scatter_sum(cspan_of(all), span_of(mine)); }, "reduce_scatter size mismatch",
                 {"reduce_scatter_sum(float): " + wrong});
    auto wide = filled<double>(4 * un + 4, 0.0);
    std::span<double> w = span_of(wide);
    expect_error([&] { c.allgather(std::span<const double>(w.subspan(1, 4)), w.first(4 * un)); },
                 "allgather with overlapping, not in-place buffers", {"overlaps"});

    std::vector<std::byte> host_bytes(4);
    expect_error([&] { (void)c.isend(std::span<const std::byte>(host_bytes), 0, 0); }, "isend from host memory",
                 {"isend: data is host memory"});

    nccl::request empty;
    empty.wait();  // a default-constructed request is harmless
    empty.synchronize();
}

// Collectives on host memory (the engine's scalar reductions): staged through the device and
// complete when the call returns, blocking or not, with host and device buffers mixed.
template <class T>
void check_host_memory_collectives_of(nccl& c, cudaStream_t compute, const std::string& type) {
    const int n = c.size();
    const int r = c.rank();
    const auto un = static_cast<std::size_t>(n);
    auto value = [](int rank, std::size_t i) {
        return static_cast<T>(rank + 1) * T(0.5) + static_cast<T>(i) * T(0.25);
    };
    std::vector<T> sums(7);
    for (std::size_t i = 0; i < sums.size(); ++i) {
        sums[i] = 0;
        for (int q = 0; q < n; ++q) sums[i] += value(q, i);
    }
    std::vector<T> values(7);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = value(r, i);
    std::vector<T> started = values;
    c.allreduce_sum(std::span<T>(values));  // no stream synchronization: the host reads at once
    expect(values == sums, type + " allreduce_sum on host memory is complete when it returns");
    auto request = c.iallreduce_sum(std::span<T>(started));
    expect(started == sums, type + " iallreduce_sum on host memory is complete when it returns");
    request.wait();
    request.synchronize();

    constexpr std::size_t k = 3;
    std::vector<T> mine(k);
    for (std::size_t i = 0; i < k; ++i) mine[i] = static_cast<T>(r * 100) + static_cast<T>(i);
    std::vector<T> expected_all(un * k);
    for (int q = 0; q < n; ++q)
        for (std::size_t i = 0; i < k; ++i)
            expected_all[static_cast<std::size_t>(q) * k + i] = static_cast<T>(q * 100) + static_cast<T>(i);
    std::vector<T> all(un * k, T(-1));
    c.allgather(std::span<const T>(mine), std::span<T>(all));
    expect(all == expected_all, type + " allgather from and to host memory");
    auto device_all = filled<T>(un * k, T(-1));
    c.allgather(std::span<const T>(mine), span_of(device_all));
    expect(read(device_all, compute) == expected_all, type + " allgather from host memory into device memory");
    gpu::device_buffer<T> device_mine{std::span<const T>(mine)};
    std::fill(all.begin(), all.end(), T(-1));
    c.allgather(cspan_of(device_mine), std::span<T>(all));
    expect(all == expected_all, type + " allgather from device memory into host memory");

    std::vector<T> block(k, T(-1));
    c.reduce_scatter_sum(std::span<const T>(expected_all), std::span<T>(block));
    bool ok = true;
    for (std::size_t i = 0; i < k; ++i)
        ok = ok && block[i] == expected_all[static_cast<std::size_t>(r) * k + i] * static_cast<T>(n);
    expect(ok, type + " reduce_scatter_sum from and to host memory");

    const int root = n - 1;
    std::vector<T> shared(4, r == root ? T(7) : T(-1));
    c.broadcast(std::as_writable_bytes(std::span<T>(shared)), root);
    expect(shared == std::vector<T>(4, T(7)), type + " broadcast of host memory");
}

void check_host_memory_collectives(nccl& c, cudaStream_t compute) {
    check_host_memory_collectives_of<float>(c, compute, "float");
    check_host_memory_collectives_of<double>(c, compute, "double");
}

// Past its timeout a host wait aborts every communicator on the GPU and throws timeout_error
// naming the rank; a communicator destroyed with work that cannot finish gives up after its
// timeout too, and aborts them. A host function holds the comm stream, as a peer that never
// comes would, until a thread releases it after 1.5 s; a fake communicator registered for
// the GPU (comm/abort_on_timeout.hpp) counts the aborts, which an unlimited wait (returning
// at the release) never makes. Runs last: the aborts reach `main`'s communicator too.
[[maybe_unused]] void check_timeouts(cudaStream_t compute) {
    std::atomic<bool> released{false};
    const auto release_later = [&released] {
        return std::jthread([&released] {
            std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            released = true;
        });
    };
    struct fake_communicator {
        int aborts = 0;
        static void abort(void* self) noexcept { ++static_cast<fake_communicator*>(self)->aborts; }
    };
    fake_communicator watched;
    auto& registry = weft::comm::abort_on_timeout::registry();
    registry.add(&watched, 0, fake_communicator::abort);
    auto ones = filled<float>(1024, 1.0f);
    auto all = filled<float>(1024, 9.0f);
    {
        nccl c = nccl::single(0, compute);
        c.set_timeout(std::chrono::milliseconds(200));
        weft_test::hold_stream(c.comm_stream(), released);
        std::jthread releaser = release_later();
        auto r = c.iallgather(cspan_of(ones), span_of(all));
        std::string message;
        try {
            r.synchronize();
        } catch (const weft::comm::timeout_error& e) {
            message = e.what();
        }
        releaser.join();
        expect(message.find("NCCL rank 0 of 1") != std::string::npos,
               "a host wait past the timeout throws timeout_error naming the rank (got: " + message + ")");
        expect(watched.aborts == 1, "it aborted every communicator on the GPU (" + std::to_string(watched.aborts) +
                                        " aborts of the watched one)");
        expect_error([&] { c.barrier(); }, "use after the timeout aborted it", {"timeout aborted"});
    }
    gpu::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after the first hold)");
    released = false;
    {
        nccl d = nccl::single(0, compute);
        d.set_timeout(std::chrono::milliseconds(200));
        weft_test::hold_stream(d.comm_stream(), released);
        std::jthread releaser = release_later();
        {
            auto unwaited = d.iallgather(cspan_of(ones), span_of(all));
            nccl gone = std::move(d);
        }  // the communicator, then the request, and with it the state: its destructor waits for the held stream
        expect(watched.aborts == 2, "a communicator destroyed with stuck work gave up after its timeout and aborted "
                                    "the GPU's communicators (" + std::to_string(watched.aborts) + " aborts)");
        releaser.join();
    }
    registry.remove(&watched);
    gpu::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after the second hold)");
}

void check_moved_from(nccl& c) {
    nccl moved = std::move(c);
    expect_error([&] { c.barrier(); }, "use of a moved-from communicator", {"moved-from"});  // NOLINT(bugprone-use-after-move)
    moved.barrier();
    c = std::move(moved);
    c.barrier();
}

void host_checks() {
    int version = 0;
    expect(ncclGetVersion(&version) == ncclSuccess && version > 0, "ncclGetVersion");
    std::printf("NCCL %d\n", version);
    expect_error([] { weft::comm::detail::nccl_check(ncclInvalidArgument, "ncclFoo"); }, "nccl_check",
                 {"ncclFoo failed", ncclGetErrorString(ncclInvalidArgument)});
    weft::comm::detail::nccl_check(ncclSuccess, "ncclFoo");  // success is silent
    expect_error([] { (void)nccl::single(-1); }, "single(-1)", {"device = -1"});
    if (gpu::device_count() == 0) {
        // No GPU: a clean weft::error, not a crash.
        expect_error([] { (void)nccl::single(0); }, "single(0) without a GPU", {"device = 0", "no usable GPU"});
    }
}

}  // namespace

#if !defined(WEFT_NCCL_TEST_MPI)

int main(int argc, char** argv) {
    return weft_test::run_device_test(
        argc, argv, {"single"}, host_checks, [](std::string_view) {
            gpu::stream compute;
            nccl c = nccl::single(0, compute);
            expect(c.rank() == 0 && c.size() == 1 && c.device() == 0 && c.native() != nullptr,
                   "single: rank 0 of 1 on device 0");
            expect(c.compute_stream() == compute.get() && c.comm_stream() != compute.get(),
                   "single: the given compute stream and its own comm stream");
            check_collectives(c, compute);
            check_point_to_point(c, compute);
            check_split(c, compute);
            check_stream_order(c, compute);
            check_self_messages(c, compute);
            check_host_memory_collectives(c, compute);
            check_errors(c);
            check_moved_from(c);
            check_timeouts(compute);
        });
}

#else

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    bool skipped = false;
    try {
        weft::comm::mpi world = weft::comm::mpi::world();
        host_checks();
        int devices = gpu::device_count();
        int fewest = 0;
        MPI_Allreduce(&devices, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (fewest == 0) {
            if (world.rank() == 0) std::printf("no CUDA device on some rank: GPU checks skipped\n");
            skipped = true;
        } else {
            // One rank per GPU of the node (the test runs on one node); the compute stream
            // is made on that device.
            const int device = world.rank() % devices;
            gpu::check(cudaSetDevice(device), "cudaSetDevice");
            gpu::stream compute;
            nccl c = nccl::from_mpi(world, device, compute);
            expect(c.rank() == world.rank() && c.size() == world.size(), "from_mpi: NCCL ranks are MPI ranks");
            check_collectives(c, compute);
            check_point_to_point(c, compute);
            check_split(c, compute);
            check_stream_order(c, compute);
            check_self_messages(c, compute);
            check_host_memory_collectives(c, compute);
            check_errors(c);
            check_moved_from(c);
            c.barrier();
        }
    } catch (const std::exception& e) {
        // The other ranks may be inside a collective: abort rather than hang.
        std::fprintf(stderr, "FAILED with an exception: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    // Every rank returns the same code: a failure anywhere fails the test; 77 only when
    // nothing failed and the GPU checks were skipped.
    int any = 0;
    MPI_Allreduce(&weft_test::failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    std::printf("%d check(s), %d failure(s)\n", weft_test::checks, weft_test::failures);
    MPI_Finalize();
    return any != 0 ? 1 : skipped ? 77 : 0;
}

#endif
