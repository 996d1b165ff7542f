// weft::poll_until: a bounded wait by polling, which gives up at its deadline, never early,
// and never reports something already done as late.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "weft/core/poll_until.hpp"

using clock_type = std::chrono::steady_clock;

TEST_CASE("poll_until returns true as soon as the query says done") {
    int queries = 0;
    CHECK(weft::poll_until([&] { return ++queries == 1; }, clock_type::now() + std::chrono::seconds(10)));
    CHECK(queries == 1);

    queries = 0;
    CHECK(weft::poll_until([&] { return ++queries == 500; }, clock_type::now() + std::chrono::seconds(10)));
    CHECK(queries == 500);  // past the spinning polls, through the yields, and no poll more
}

TEST_CASE("poll_until asks once even when the deadline has passed, so done is never late") {
    int queries = 0;
    CHECK(weft::poll_until([&] { return ++queries > 0; }, clock_type::now() - std::chrono::seconds(1)));
    CHECK(queries == 1);

    queries = 0;
    CHECK_FALSE(weft::poll_until([&] { return ++queries < 0; }, clock_type::now() - std::chrono::seconds(1)));
    CHECK(queries == 1);
}

TEST_CASE("poll_until gives up at its deadline and not before") {
    const auto limit = std::chrono::milliseconds(30);
    const auto start = clock_type::now();
    int queries = 0;
    CHECK_FALSE(weft::poll_until([&] { return ++queries < 0; }, start + limit));
    CHECK(clock_type::now() - start >= limit);
    CHECK(queries > 1);
}

TEST_CASE("poll_until sees what another thread finishes") {
    std::atomic<bool> finished{false};
    std::thread worker([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        finished = true;
    });
    const bool done = weft::poll_until([&] { return finished.load(); }, clock_type::time_point::max());
    worker.join();
    CHECK(done);
}

TEST_CASE("an error the query throws leaves poll_until") {
    int queries = 0;
    CHECK_THROWS_AS(weft::poll_until(
                        [&]() -> bool {
                            if (++queries == 3) throw std::runtime_error("the stream failed");
                            return false;
                        },
                        clock_type::time_point::max()),
                    std::runtime_error);
    CHECK(queries == 3);
}
