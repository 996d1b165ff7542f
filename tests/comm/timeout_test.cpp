// comm/timeout.hpp: the timeout setting's bounds and the timeout_error's message, which
// must name the rank, the operation, the peer, the time waited, the action and the remedy;
// comm/abort_on_timeout.hpp: what a timed-out wait aborts.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "weft/comm/abort_on_timeout.hpp"
#include "weft/comm/timeout.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using weft::comm::checked_timeout;
using weft::comm::no_timeout;
using weft::comm::timeout_error;

TEST_CASE("checked_timeout keeps positive durations and saturates long ones to no_timeout", "[comm][timeout]") {
    CHECK(checked_timeout(300s) == 300s);
    CHECK(checked_timeout(std::chrono::duration<double>(0.25)) == 250ms);
    CHECK(checked_timeout(std::chrono::duration<double>(1e-15)).count() == 1);  // not rounded to 0
    CHECK(checked_timeout(std::chrono::seconds::max()) == no_timeout);
    CHECK(checked_timeout(std::chrono::hours(24 * 365 * 100)) == no_timeout);
    CHECK(checked_timeout(std::chrono::duration<double>(INFINITY)) == no_timeout);
    CHECK(weft::comm::deadline_after(no_timeout) == weft::comm::timeout_clock::time_point::max());
}

TEST_CASE("checked_timeout refuses zero, negative and NaN durations, naming the parameter", "[comm][timeout]") {
    CHECK_THROWS_WITH(checked_timeout(0s), Contains("timeout = \"0 s\" is invalid: must be > 0"));
    CHECK_THROWS_WITH(checked_timeout(-2s, "--comm-timeout"), Contains("--comm-timeout = \"-2 s\" is invalid"));
    CHECK_THROWS_WITH(checked_timeout(std::chrono::duration<double>(std::nan(""))), Contains("must be > 0"));
}

TEST_CASE("timeout_error names rank, operation, peer, time, action and remedy", "[comm][timeout]") {
    const timeout_error e({.rank = 2,
                           .operation = "irecv(source=1, tag=17) of 64 bytes",
                           .peers = {1},
                           .waited_seconds = 5.04,
                           .timeout_seconds = 5,
                           .action = {}});
    const std::string text = e.what();
    CHECK_THAT(text, Contains("weft: communication timeout: rank 2 waited 5.0 s (timeout 5 s) in "
                              "irecv(source=1, tag=17) of 64 bytes for rank 1;"));
    CHECK_THAT(text, Contains("not stopped") && Contains("--comm-timeout") && Contains("set_timeout"));
    CHECK_THAT(text, !Contains("during"));

    const timeout_error with = e.with_action("action 1RECV_F3 on pipeline rank 1");
    CHECK_THAT(with.what(), Contains("for rank 1, during action 1RECV_F3 on pipeline rank 1;"));
    CHECK(with.info().peers == std::vector<int>{1});
    CHECK_THAT(with.what(), !Contains("weft: weft:"));

    const timeout_error several({.rank = 0, .operation = "barrier()", .peers = {2, 3}, .waited_seconds = 1,
                                 .timeout_seconds = 1, .action = {}});
    CHECK_THAT(several.what(), Contains("in barrier() for ranks 2, 3;"));
    // An error like any other weft::error.
    CHECK_THROWS_AS(throw several, weft::error);
}

namespace {
struct fake_communicator {
    int aborts = 0;
    static void abort(void* self) noexcept { ++static_cast<fake_communicator*>(self)->aborts; }
};
}  // namespace

TEST_CASE("a timed-out wait aborts every registered communicator of its device, and only those",
          "[comm][timeout]") {
    auto& registry = weft::comm::abort_on_timeout::registry();
    fake_communicator a;
    fake_communicator b;
    fake_communicator elsewhere;
    const int before = registry.registered(5);
    registry.add(&a, 5, fake_communicator::abort);
    registry.add(&b, 5, fake_communicator::abort);
    registry.add(&elsewhere, 6, fake_communicator::abort);
    CHECK(registry.registered(5) == before + 2);
    CHECK(registry.abort_all(5) == before + 2);
    CHECK(a.aborts == 1);
    CHECK(b.aborts == 1);
    CHECK(elsewhere.aborts == 0);  // another GPU's work is not stuck behind this one

    registry.remove(&a);  // gone: a later timeout must not touch it
    CHECK(registry.abort_all(5) == before + 1);
    CHECK(a.aborts == 1);
    CHECK(b.aborts == 2);
    registry.remove(&b);
    registry.remove(&elsewhere);
    CHECK(registry.registered(5) == before);
    CHECK(registry.registered(6) == 0);
}

namespace {
// Two communicators whose aborts each wait for the other's to start, as two NCCL
// communicators whose streams wait on each other do (ncclCommAbort waits for its streams).
struct entangled_communicator {
    std::atomic<int>* started;
    bool saw_the_other = false;
    static void abort(void* self) noexcept {
        auto* c = static_cast<entangled_communicator*>(self);
        ++*c->started;
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (c->started->load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        c->saw_the_other = c->started->load() == 2;
    }
};
}  // namespace

TEST_CASE("the aborts of one timeout run at once, so aborts that wait on each other end", "[comm][timeout]") {
    auto& registry = weft::comm::abort_on_timeout::registry();
    std::atomic<int> started{0};
    entangled_communicator a{&started};
    entangled_communicator b{&started};
    registry.add(&a, 7, entangled_communicator::abort);
    SECTION("both registered") {
        registry.add(&b, 7, entangled_communicator::abort);
        CHECK(registry.abort_all(7) == 2);
        registry.remove(&b);
    }
    SECTION("one of them leaving the registry, as a communicator being destroyed") {
        const weft::comm::abort_on_timeout::member leaving{&b, 7, entangled_communicator::abort};
        CHECK(registry.abort_all(7, &leaving) == 2);
    }
    registry.remove(&a);
    // One after the other, the first would have given up waiting for the second.
    CHECK(a.saw_the_other);
    CHECK(b.saw_the_other);
}

TEST_CASE("a GPU is idle for the registry when every communicator registered on it is", "[comm][timeout]") {
    struct busy_communicator {
        bool in_flight = false;
        static void abort(void*) noexcept {}
        static bool idle(void* self) noexcept { return !static_cast<busy_communicator*>(self)->in_flight; }
    };
    auto& registry = weft::comm::abort_on_timeout::registry();
    busy_communicator here;
    busy_communicator elsewhere;
    fake_communicator without_work;  // no idle query: never has work in flight
    registry.add(&here, 8, busy_communicator::abort, busy_communicator::idle);
    registry.add(&elsewhere, 9, busy_communicator::abort, busy_communicator::idle);
    registry.add(&without_work, 8, fake_communicator::abort);
    CHECK(registry.all_idle(8));
    here.in_flight = true;
    CHECK_FALSE(registry.all_idle(8));
    CHECK(registry.all_idle(9));  // another GPU's work does not count
    here.in_flight = false;
    elsewhere.in_flight = true;
    CHECK(registry.all_idle(8));
    CHECK_FALSE(registry.all_idle(9));
    registry.remove(&here);
    registry.remove(&elsewhere);
    registry.remove(&without_work);
}
