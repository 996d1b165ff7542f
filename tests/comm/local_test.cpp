// comm::local: the shared communicator checks on 1..4 threads, plus what only the
// local backend promises (rank-ordered sums, failure propagation, deadlock reports).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <string>
#include <vector>

#include "communicator_checks.hpp"
#include "weft/comm/local.hpp"
#include "weft/comm/timeout.hpp"

using weft::comm::local;
using Catch::Matchers::Contains;

namespace {

// Runs check(comm, expectations) on every rank and reports all failures on this thread.
template <class Check>
void run_on_all_ranks(int world_size, Check check) {
    std::mutex mutex;
    std::vector<std::string> failures;
    local::run(world_size, [&](local& c) {
        weft_test::expectations e;
        check(c, e);
        std::lock_guard lock(mutex);
        for (auto& f : e.failures) failures.push_back("rank " + std::to_string(c.rank()) + ": " + f);
    });
    INFO("world size " << world_size);
    for (const auto& f : failures) FAIL_CHECK(f);
    CHECK(failures.empty());
}

}  // namespace

static_assert(weft::communicator<local>);
// It moves host memory: the engine pairs it with host backends (exec::cpu) only.
static_assert(std::is_same_v<local::memory_space, weft::host_space>);
static_assert(!std::is_copy_constructible_v<local>);
static_assert(!std::is_copy_constructible_v<local::request>);

TEST_CASE("local passes the shared communicator checks", "[comm][local]") {
    const int n = GENERATE(1, 2, 3, 4);
    SECTION("point to point") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_point_to_point(c, e); }); }
    SECTION("fifo per tag") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_fifo_per_tag(c, e); }); }
    SECTION("out of order tags") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_out_of_order_tags(c, e); }); }
    SECTION("allreduce") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_allreduce(c, e); }); }
    SECTION("allgather and reduce_scatter") {
        run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_allgather_and_reduce_scatter(c, e); });
    }
    SECTION("non-blocking collectives") {
        run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_nonblocking_collectives(c, e); });
    }
    SECTION("broadcast") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_broadcast(c, e); }); }
    SECTION("barrier") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_barrier(c, e); }); }
    SECTION("split") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_split(c, e); }); }
    SECTION("size mismatch") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_size_mismatch(c, e); }); }
    SECTION("bad arguments") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_bad_arguments(c, e); }); }
    SECTION("collective length mismatch") {
        run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_collective_length_mismatch(c, e); });
    }
    SECTION("timeout setting") { run_on_all_ranks(n, [](local& c, auto& e) { weft_test::check_timeout_setting(c, e); }); }
}

TEST_CASE("local allreduce sums in rank order, bit for bit on every rank", "[comm][local]") {
    const int n = GENERATE(2, 3, 4);
    // Large and small magnitudes: the result depends on the order of the additions.
    auto value_f = [](int rank, std::size_t i) {
        const float v[] = {1.0e8f, 3.25f, -1.0e8f, 0.1f};
        return v[static_cast<std::size_t>(rank) % 4] * (1.0f + static_cast<float>(i) * 1e-3f);
    };
    auto value_d = [](int rank, std::size_t i) {
        const double v[] = {1.0e17, 0.3, -1.0e17, 7.1};
        return v[static_cast<std::size_t>(rank) % 4] * (1.0 + static_cast<double>(i) * 1e-3);
    };
    run_on_all_ranks(n, [&](local& c, weft_test::expectations& e) {
        std::vector<float> f(16);
        std::vector<double> d(16);
        for (std::size_t i = 0; i < f.size(); ++i) {
            f[i] = value_f(c.rank(), i);
            d[i] = value_d(c.rank(), i);
        }
        c.allreduce_sum(std::span<float>(f));
        c.allreduce_sum(std::span<double>(d));
        for (std::size_t i = 0; i < f.size(); ++i) {
            float ef = value_f(0, i);
            double ed = value_d(0, i);
            for (int r = 1; r < c.size(); ++r) {
                ef += value_f(r, i);
                ed += value_d(r, i);
            }
            e.expect(std::memcmp(&f[i], &ef, sizeof ef) == 0, "float element " + std::to_string(i));
            e.expect(std::memcmp(&d[i], &ed, sizeof ed) == 0, "double element " + std::to_string(i));
        }
    });
}

TEST_CASE("local::run rethrows the first failure and wakes blocked ranks", "[comm][local]") {
    const int n = GENERATE(2, 3, 4);
    std::atomic<int> woken{0};
    auto run = [&] {
        local::run(n, [&](local& c) {
            if (c.rank() == 1) throw std::runtime_error("boom");
            try {
                if (c.rank() == 0) {
                    std::vector<std::byte> buffer(4);
                    c.irecv(std::span<std::byte>(buffer), 1, 0).wait();  // rank 1 never sends
                } else {
                    c.barrier();  // rank 1 never arrives
                }
            } catch (const weft::error& e) {
                if (std::string(e.what()).find("rank 1 failed") != std::string::npos) ++woken;
                throw;
            }
        });
    };
    REQUIRE_THROWS_WITH(run(), Contains("rank 1 failed: boom"));
    CHECK(woken == n - 1);
}

TEST_CASE("local::run reports a deadlock instead of hanging", "[comm][local]") {
    SECTION("every rank waits for a message that is never sent") {
        auto run = [] {
            local::run(3, [](local& c) {
                std::vector<std::byte> buffer(1);
                c.irecv(std::span<std::byte>(buffer), (c.rank() + 1) % 3, 5).wait();
            });
        };
        REQUIRE_THROWS_WITH(run(), Contains("deadlock") && Contains("irecv(source=1, tag=5)"));
    }
    SECTION("a rank returned while another waits in a barrier") {
        auto run = [] {
            local::run(2, [](local& c) {
                if (c.rank() == 0) c.barrier();
            });
        };
        REQUIRE_THROWS_WITH(run(), Contains("deadlock") && Contains("rank 1 has returned") &&
                                       Contains("barrier"));
    }
    SECTION("mismatched collectives in sub-groups do not hang") {
        auto run = [] {
            local::run(4, [](local& c) {
                local sub = c.split(c.rank() % 2, 0);
                if (c.rank() != 3) sub.barrier();
            });
        };
        REQUIRE_THROWS_WITH(run(), Contains("deadlock"));
    }
}

TEST_CASE("local requests are safe to drop, wait twice and move", "[comm][local]") {
    run_on_all_ranks(2, [](local& c, weft_test::expectations& e) {
        const int other = 1 - c.rank();
        {
            std::vector<std::byte> never(4);
            auto dropped = c.irecv(std::span<std::byte>(never), other, 9);
            // Dropped without wait: the receive is cancelled and its buffer never written.
        }
        c.barrier();
        std::vector<std::int32_t> out = {c.rank() + 40}, in = {0};
        auto send = c.isend(weft_test::bytes_of(out), other, 9);
        out[0] = -1;  // isend copied: changing the buffer now must not change the message
        local::request r = c.irecv(weft_test::writable_bytes_of(in), other, 9);
        local::request moved_to;
        moved_to = std::move(r);
        r.wait();
        moved_to.wait();
        moved_to.wait();
        send.wait();
        e.expect(in[0] == other + 40, "message matched the posted receive, not the dropped one");
    });
}

TEST_CASE("local::run rejects a bad world size and moved-from communicators", "[comm][local]") {
    REQUIRE_THROWS_WITH(local::run(0, [](local&) {}), Contains("world_size") && Contains("0"));
    run_on_all_ranks(1, [](local& c, weft_test::expectations& e) {
        local moved = std::move(c);
        e.expect_weft_error([&] { c.barrier(); }, "barrier on a moved-from local", {"moved-from"});
        moved.barrier();
    });
}

// A peer that computes (here: sleeps) past the timeout is no deadlock, so only the timeout
// reports it: the waiting rank throws timeout_error, and the run fails with its message.
TEST_CASE("local waits end at the communicator's timeout", "[comm][local][timeout]") {
    using namespace std::chrono_literals;
    using weft::comm::timeout_error;
    std::mutex mutex;
    std::optional<timeout_error::details> seen;
    auto record = [&](const timeout_error& e) {
        std::lock_guard lock(mutex);
        seen = e.info();
    };
    SECTION("a receive whose sender never sends") {
        auto run = [&] {
            local::run(2, [&](local& c) {
                c.set_timeout(200ms);
                if (c.rank() == 1) {
                    std::this_thread::sleep_for(1500ms);
                    return;
                }
                std::vector<std::byte> buffer(8);
                try {
                    c.irecv(std::span<std::byte>(buffer), 1, 17).wait();
                } catch (const timeout_error& e) {
                    record(e);
                    throw;
                }
            });
        };
        REQUIRE_THROWS_WITH(run(), Contains("rank 0 failed: communication timeout: rank 0 waited") &&
                                       Contains("irecv(source=1, tag=17) of 8 bytes for rank 1") &&
                                       Contains("not stopped") && Contains("--comm-timeout"));
        REQUIRE(seen);
        CHECK(seen->rank == 0);
        CHECK(seen->peers == std::vector<int>{1});
        CHECK(seen->waited_seconds >= 0.2);
        CHECK(seen->waited_seconds < 1.4);
        CHECK(seen->timeout_seconds == Approx(0.2));
    }
    SECTION("a collective one rank of a split group does not join names that rank") {
        auto run = [&] {
            local::run(4, [&](local& c) {
                c.set_timeout(200ms);
                local sub = c.split(c.rank() % 2, c.rank());  // {0, 2} and {1, 3}; the timeout is inherited
                if (c.rank() == 3) {
                    std::this_thread::sleep_for(1500ms);
                    return;
                }
                if (c.rank() != 1) {
                    sub.barrier();  // {0, 2} is complete and unaffected
                    return;
                }
                std::vector<float> values(2, 1.0f);
                try {
                    sub.allreduce_sum(std::span<float>(values));
                } catch (const timeout_error& e) {
                    record(e);
                    throw;
                }
            });
        };
        REQUIRE_THROWS_WITH(run(), Contains("rank 1 failed: communication timeout: rank 1 waited") &&
                                       Contains("allreduce_sum(float) of 2 elements for rank 3"));
        REQUIRE(seen);
        CHECK(seen->peers == std::vector<int>{3});
    }
    SECTION("the other ranks wake when one times out") {
        std::atomic<int> woken{0};
        auto run = [&] {
            local::run(3, [&](local& c) {
                c.set_timeout(c.rank() == 0 ? 200ms : 100s);
                if (c.rank() == 2) {
                    std::this_thread::sleep_for(1500ms);
                    return;
                }
                try {
                    c.barrier();
                } catch (const timeout_error&) {
                    throw;
                } catch (const weft::error& e) {
                    if (std::string(e.what()).find("rank 0 failed: communication timeout") != std::string::npos) ++woken;
                    throw;
                }
            });
        };
        const auto start = std::chrono::steady_clock::now();
        REQUIRE_THROWS_WITH(run(), Contains("rank 0 failed: communication timeout") && Contains("for rank 2"));
        CHECK(woken == 1);  // rank 1, whose own timeout is 100 s
        CHECK(std::chrono::steady_clock::now() - start < 10s);
    }
}
