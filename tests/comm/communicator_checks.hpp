// Behaviour checks every weft::communicator must pass, written once and instantiated
// per backend (local_test.cpp, mpi_test.cpp). Each is collective: every rank of `c`
// calls it, and records what went wrong in `expectations` rather than asserting,
// because Catch2's assertions must not run on several threads at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/core/error.hpp"

namespace weft_test {

// Collects failed expectations of one rank; the caller asserts on them afterwards on
// its own thread (Catch2 assertions are not safe from several threads at once).
struct expectations {
    std::vector<std::string> failures;
    void expect(bool ok, const std::string& what) {
        if (!ok) failures.push_back(what);
    }
    template <class Fn>
    void expect_weft_error(Fn&& fn, const std::string& what, const std::vector<std::string>& mentions = {}) {
        try {
            fn();
            failures.push_back(what + ": no weft::error thrown");
        } catch (const weft::error& e) {
            std::string message = e.what();
            for (const auto& m : mentions) {
                if (message.find(m) == std::string::npos) {
                    failures.push_back(what + ": message \"" + message + "\" does not mention \"" + m + "\"");
                }
            }
        }
    }
};

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
    return std::as_bytes(std::span(v));
}
template <class T>
std::span<std::byte> writable_bytes_of(std::vector<T>& v) {
    return std::as_writable_bytes(std::span(v));
}

// Ring: each rank sends a rank-specific payload to the next and receives from the previous.
template <weft::communicator C>
void check_point_to_point(C& c, expectations& e) {
    const int n = c.size();
    const int r = c.rank();
    const int next = (r + 1) % n;
    const int prev = (r + n - 1) % n;
    std::vector<std::int32_t> out = {r, r * 10, -r, 12345};
    std::vector<std::int32_t> in(4, -1);
    auto recv = c.irecv(writable_bytes_of(in), prev, 3);
    auto send = c.isend(bytes_of(out), next, 3);
    send.wait();
    recv.wait();
    e.expect(in == std::vector<std::int32_t>{prev, prev * 10, -prev, 12345}, "ring payload from previous rank");
    // Waiting twice and waiting on a moved-from request are harmless.
    recv.wait();
    auto moved = std::move(send);
    send.wait();  // NOLINT(bugprone-use-after-move): that is the point
    moved.wait();
    // Empty messages are messages too.
    auto empty_recv = c.irecv({}, prev, 4);
    auto empty_send = c.isend({}, next, 4);
    empty_send.wait();
    empty_recv.wait();
}

// Per (source, tag) messages do not overtake; receives match in the order they were
// posted even when waited for in reverse.
template <weft::communicator C>
void check_fifo_per_tag(C& c, expectations& e) {
    const int n = c.size();
    const int next = (c.rank() + 1) % n;
    const int prev = (c.rank() + n - 1) % n;
    constexpr int count = 8;
    std::vector<std::vector<std::int32_t>> out(count), in(count, std::vector<std::int32_t>(1, -1));
    std::vector<typename C::request> sends, recvs;
    for (int k = 0; k < count; ++k) {
        out[static_cast<std::size_t>(k)] = {k};
        sends.push_back(c.isend(bytes_of(out[static_cast<std::size_t>(k)]), next, 7));
    }
    for (int k = 0; k < count; ++k) recvs.push_back(c.irecv(writable_bytes_of(in[static_cast<std::size_t>(k)]), prev, 7));
    for (int k = count - 1; k >= 0; --k) recvs[static_cast<std::size_t>(k)].wait();
    for (auto& s : sends) s.wait();
    for (int k = 0; k < count; ++k) e.expect(in[static_cast<std::size_t>(k)][0] == k, "message " + std::to_string(k) + " arrived in order");
}

// Different tags are independent streams: a receive for a later-sent tag completes first.
template <weft::communicator C>
void check_out_of_order_tags(C& c, expectations& e) {
    const int n = c.size();
    const int next = (c.rank() + 1) % n;
    const int prev = (c.rank() + n - 1) % n;
    std::vector<std::int32_t> a = {111}, b = {222}, got_a = {0}, got_b = {0};
    auto s1 = c.isend(bytes_of(a), next, 1);
    auto s2 = c.isend(bytes_of(b), next, 32767);
    auto r2 = c.irecv(writable_bytes_of(got_b), prev, 32767);
    r2.wait();
    auto r1 = c.irecv(writable_bytes_of(got_a), prev, 1);
    r1.wait();
    s1.wait();
    s2.wait();
    e.expect(got_a[0] == 111 && got_b[0] == 222, "tags 1 and 32767 matched to their own messages");
}

// Values are small dyadic numbers, so the sum is exact in any order and this check is
// valid for every backend; local's rank-order guarantee is checked in local_test.cpp.
template <weft::communicator C, class T>
void check_allreduce_of(C& c, expectations& e) {
    const int n = c.size();
    auto value = [](int rank, std::size_t i) { return static_cast<T>(rank + 1) * T(0.5) + static_cast<T>(i) * T(0.25); };
    std::vector<T> data(37);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = value(c.rank(), i);
    c.allreduce_sum(std::span<T>(data));
    bool ok = true;
    for (std::size_t i = 0; i < data.size(); ++i) {
        T expected = value(0, i);
        for (int r = 1; r < n; ++r) expected += value(r, i);
        ok = ok && data[i] == expected;
    }
    e.expect(ok, "allreduce_sum equals the sum over ranks");
    std::vector<T> none;
    c.allreduce_sum(std::span<T>(none));  // an empty reduction is fine
}

template <weft::communicator C>
void check_allreduce(C& c, expectations& e) {
    check_allreduce_of<C, float>(c, e);
    check_allreduce_of<C, double>(c, e);
}

// Same dyadic values as above: exact in any summation order.
template <weft::communicator C, class T>
void check_allgather_and_reduce_scatter_of(C& c, expectations& e) {
    const int n = c.size();
    const std::size_t block = 5;
    auto value = [](int rank, std::size_t i) { return static_cast<T>(rank + 1) * T(0.5) + static_cast<T>(i) * T(0.25); };
    std::vector<T> mine(block);
    for (std::size_t i = 0; i < block; ++i) mine[i] = value(c.rank(), i);
    std::vector<T> all(block * static_cast<std::size_t>(n), T(-1));
    c.allgather(std::span<const T>(mine), std::span<T>(all));
    bool gathered = true;
    for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < block; ++i) gathered = gathered && all[std::size_t(r) * block + i] == value(r, i);
    e.expect(gathered, "allgather puts rank r's block at r");

    // Every rank contributes value(rank, i) at every full-buffer index i.
    std::vector<T> full(block * static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < full.size(); ++i) full[i] = value(c.rank(), i);
    std::vector<T> sum(block, T(-1));
    c.reduce_scatter_sum(std::span<const T>(full), std::span<T>(sum));
    bool scattered = true;
    for (std::size_t i = 0; i < block; ++i) {
        const std::size_t global = std::size_t(c.rank()) * block + i;
        T expected = value(0, global);
        for (int r = 1; r < n; ++r) expected += value(r, global);
        scattered = scattered && sum[i] == expected;
    }
    e.expect(scattered, "reduce_scatter_sum gives rank r the sum of block r");

    std::vector<T> wrong(block * static_cast<std::size_t>(n) + 1);
    e.expect_weft_error([&] { c.allgather(std::span<const T>(mine), std::span<T>(wrong)); },
                        "allgather with a full buffer of the wrong size", {"all.size()"});
    e.expect_weft_error([&] { c.reduce_scatter_sum(std::span<const T>(wrong), std::span<T>(sum)); },
                        "reduce_scatter_sum with a full buffer of the wrong size", {"all.size()"});
}

// Non-blocking collectives complete in wait(), may be outstanding while later collectives
// run, and may be waited for in any order.
template <weft::communicator C, class T>
void check_nonblocking_collectives_of(C& c, expectations& e) {
    const int n = c.size();
    const std::size_t block = 3;
    std::vector<T> reduced(7, static_cast<T>(c.rank() + 1));
    std::vector<T> mine(block, static_cast<T>(c.rank()));
    std::vector<T> all(block * static_cast<std::size_t>(n), T(-1));
    std::vector<T> full(block * static_cast<std::size_t>(n), T(1));
    std::vector<T> part(block, T(-1));
    auto first = c.iallreduce_sum(std::span<T>(reduced));
    auto second = c.iallgather(std::span<const T>(mine), std::span<T>(all));
    auto third = c.ireduce_scatter_sum(std::span<const T>(full), std::span<T>(part));
    std::vector<T> blocking(2, T(1));
    c.allreduce_sum(std::span<T>(blocking));  // a blocking collective while three are in flight
    third.wait();
    first.wait();
    second.wait();
    first.wait();  // twice is harmless
    const T rank_sum = static_cast<T>(n * (n + 1) / 2);
    e.expect(std::all_of(reduced.begin(), reduced.end(), [&](T v) { return v == rank_sum; }),
             "iallreduce_sum equals the sum over ranks");
    bool gathered = true;
    for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < block; ++i) gathered = gathered && all[std::size_t(r) * block + i] == T(r);
    e.expect(gathered, "iallgather puts rank r's block at r");
    e.expect(std::all_of(part.begin(), part.end(), [&](T v) { return v == static_cast<T>(n); }),
             "ireduce_scatter_sum gives the sum of block r");
    e.expect(std::all_of(blocking.begin(), blocking.end(), [&](T v) { return v == static_cast<T>(n); }),
             "a blocking allreduce between non-blocking ones");
}

template <weft::communicator C>
void check_allgather_and_reduce_scatter(C& c, expectations& e) {
    check_allgather_and_reduce_scatter_of<C, float>(c, e);
    check_allgather_and_reduce_scatter_of<C, double>(c, e);
}

template <weft::communicator C>
void check_nonblocking_collectives(C& c, expectations& e) {
    check_nonblocking_collectives_of<C, float>(c, e);
    check_nonblocking_collectives_of<C, double>(c, e);
}

template <weft::communicator C>
void check_broadcast(C& c, expectations& e) {
    for (int root = 0; root < c.size(); ++root) {
        std::vector<std::uint8_t> data(13);
        for (std::size_t i = 0; i < data.size(); ++i) {
            data[i] = static_cast<std::uint8_t>(c.rank() == root ? root * 16 + static_cast<int>(i) : 255);
        }
        c.broadcast(writable_bytes_of(data), root);
        bool ok = true;
        for (std::size_t i = 0; i < data.size(); ++i) ok = ok && data[i] == static_cast<std::uint8_t>(root * 16 + static_cast<int>(i));
        e.expect(ok, "broadcast from root " + std::to_string(root));
    }
}

// No rank leaves a barrier before the last one entered. The last rank enters late and
// broadcasts its entry time (steady_clock is one clock for all processes of a node).
template <weft::communicator C>
void check_barrier(C& c, expectations& e) {
    using clock = std::chrono::steady_clock;
    const int late = c.size() - 1;
    c.barrier();
    if (c.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::vector<std::int64_t> entered = {clock::now().time_since_epoch().count()};
    c.barrier();
    std::vector<std::int64_t> left = {clock::now().time_since_epoch().count()};
    c.broadcast(writable_bytes_of(entered), late);
    e.expect(left[0] >= entered[0], "no rank left the barrier before the last rank entered it");
}

// Even and odd ranks form two groups, ordered by descending world rank (key = -rank),
// and run point-to-point and collectives inside them.
template <weft::communicator C>
void check_split(C& c, expectations& e) {
    const int n = c.size();
    const int r = c.rank();
    C sub = c.split(r % 2, -r);
    std::vector<int> members;
    for (int q = n - 1; q >= 0; --q) {
        if (q % 2 == r % 2) members.push_back(q);  // sorted by key = -q
    }
    const int expected_rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
    e.expect(sub.size() == static_cast<int>(members.size()), "split group size");
    e.expect(sub.rank() == expected_rank, "split rank ordered by key");
    std::vector<double> sum = {static_cast<double>(r)};
    sub.allreduce_sum(std::span<double>(sum));
    double expected = 0;
    for (int q : members) expected += q;
    e.expect(sum[0] == expected, "allreduce inside a split group sums only its members");
    std::vector<std::int32_t> from_root = {sub.rank() == 0 ? r : -1};
    sub.broadcast(writable_bytes_of(from_root), 0);
    e.expect(from_root[0] == members[0], "broadcast inside a split group");
    // The sub-communicator carries its own messages: same tag as on the parent, no mix-up.
    const int sn = sub.size();
    std::vector<std::int32_t> out = {r}, in = {-1};
    auto recv = sub.irecv(writable_bytes_of(in), (sub.rank() + sn - 1) % sn, 3);
    auto send = sub.isend(bytes_of(out), (sub.rank() + 1) % sn, 3);
    send.wait();
    recv.wait();
    e.expect(in[0] == members[static_cast<std::size_t>((sub.rank() + sn - 1) % sn)], "ring inside a split group");
    sub.barrier();
    // A communicator is movable; the moved-to one still works.
    C moved = std::move(sub);
    moved.barrier();
    // One color for all: a duplicate of the parent.
    C all = c.split(0, r);
    e.expect(all.size() == n && all.rank() == r, "split with one color keeps size and rank");
}

// A receive whose buffer size differs from the message is an error naming both sizes.
template <weft::communicator C>
void check_size_mismatch(C& c, expectations& e) {
    const int n = c.size();
    const int next = (c.rank() + 1) % n;
    const int prev = (c.rank() + n - 1) % n;
    std::vector<std::byte> eight(8), four(4);
    {
        auto send = c.isend(std::span<const std::byte>(eight), next, 11);
        auto recv = c.irecv(std::span<std::byte>(four), prev, 11);
        e.expect_weft_error([&] { recv.wait(); }, "recv of 8 bytes into 4", {"4 bytes", "8"});
        send.wait();
    }
    {
        auto send = c.isend(std::span<const std::byte>(four), next, 12);
        auto recv = c.irecv(std::span<std::byte>(eight), prev, 12);
        e.expect_weft_error([&] { recv.wait(); }, "recv of 4 bytes into 8", {"8 bytes", "4 bytes"});
        send.wait();
    }
    c.barrier();
}

template <weft::communicator C>
void check_bad_arguments(C& c, expectations& e) {
    const int n = c.size();
    std::vector<std::byte> buffer(4);
    e.expect_weft_error([&] { (void)c.isend(std::span<const std::byte>(buffer), 0, -1); }, "tag -1", {"tag", "-1"});
    e.expect_weft_error([&] { (void)c.isend(std::span<const std::byte>(buffer), 0, 32768); }, "tag 32768", {"tag", "32768", "32767"});
    e.expect_weft_error([&] { (void)c.irecv(std::span<std::byte>(buffer), 0, 40000); }, "recv tag 40000", {"tag"});
    e.expect_weft_error([&] { (void)c.isend(std::span<const std::byte>(buffer), n, 0); }, "dest == size", {"dest", std::to_string(n)});
    e.expect_weft_error([&] { (void)c.isend(std::span<const std::byte>(buffer), -1, 0); }, "dest -1", {"dest"});
    e.expect_weft_error([&] { (void)c.irecv(std::span<std::byte>(buffer), n, 0); }, "source == size", {"source"});
    e.expect_weft_error([&] { c.broadcast(std::span<std::byte>(buffer), n); }, "root == size", {"root"});
    e.expect_weft_error([&] { (void)c.split(-1, 0); }, "negative color", {"color"});
    c.barrier();
}

// Collectives with different lengths on different ranks fail on every rank.
template <weft::communicator C>
void check_collective_length_mismatch(C& c, expectations& e) {
    if (c.size() < 2) return;
    std::vector<float> data(c.rank() == 0 ? 3 : 4, 1.0f);
    e.expect_weft_error([&] { c.allreduce_sum(std::span<float>(data)); }, "allreduce with mismatched lengths", {"mismatch"});
    std::vector<std::byte> bytes(c.rank() == 0 ? 5 : 6);
    e.expect_weft_error([&] { c.broadcast(std::span<std::byte>(bytes), 0); }, "broadcast with mismatched lengths", {"mismatch"});
    std::vector<float> all(data.size() * static_cast<std::size_t>(c.size()));
    e.expect_weft_error([&] { c.allgather(std::span<const float>(data), std::span<float>(all)); },
                        "allgather with mismatched lengths", {"mismatch"});
    e.expect_weft_error([&] { c.iallreduce_sum(std::span<float>(data)).wait(); },
                        "iallreduce_sum with mismatched lengths", {"mismatch"});
}

// The watchdog's setting: 300 s by default, > 0, "forever" expressible, inherited by split.
// Not in check_all: only the host backends have it (nccl's is for host waits only).
template <weft::communicator C>
void check_timeout_setting(C& c, expectations& e) {
    using namespace std::chrono_literals;
    e.expect(c.timeout() == weft::comm::default_timeout, "the default timeout is 300 s");
    e.expect(weft::comm::default_timeout == 300s, "default_timeout is 300 s");
    e.expect_weft_error([&] { c.set_timeout(0s); }, "timeout 0", {"timeout = \"0 s\" is invalid", "must be > 0"});
    e.expect_weft_error([&] { c.set_timeout(-1500ms); }, "negative timeout", {"timeout = \"-1.5 s\" is invalid"});
    e.expect_weft_error([&] { c.set_timeout(std::chrono::duration<double>(std::nan(""))); }, "NaN timeout",
                        {"timeout", "must be > 0"});
    e.expect(c.timeout() == weft::comm::default_timeout, "a refused timeout leaves the setting alone");
    c.set_timeout(std::chrono::seconds::max());
    e.expect(c.timeout() == weft::comm::no_timeout, "seconds::max() is no_timeout");
    c.set_timeout(std::chrono::duration<double>(INFINITY));
    e.expect(c.timeout() == weft::comm::no_timeout, "an infinite duration is no_timeout");
    c.set_timeout(2500ms);
    e.expect(c.timeout() == 2500ms, "2.5 s is kept as given");
    {
        C sub = c.split(0, c.rank());
        e.expect(sub.timeout() == 2500ms, "split() inherits the timeout");
        sub.barrier();  // waits within the timeout are not affected
    }
    c.set_timeout(weft::comm::default_timeout);
}

template <weft::communicator C>
void check_all(C& c, expectations& e) {
    check_point_to_point(c, e);
    check_fifo_per_tag(c, e);
    check_out_of_order_tags(c, e);
    check_allreduce(c, e);
    check_allgather_and_reduce_scatter(c, e);
    check_nonblocking_collectives(c, e);
    check_broadcast(c, e);
    check_barrier(c, e);
    check_split(c, e);
    check_size_mismatch(c, e);
    check_bad_arguments(c, e);
    check_collective_length_mismatch(c, e);
}

}  // namespace weft_test
