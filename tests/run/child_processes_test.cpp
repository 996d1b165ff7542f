#include <catch2/catch.hpp>

#include <chrono>

#include "weft/run/child_processes.hpp"

TEST_CASE("child processes are waited for, and the ones that stay are killed", "[run][child_processes]") {
    {
        weft::run::child_processes done("/bin/sh");
        done.start(0, {"-c", "exit 0"});
        CHECK(done.reap(std::chrono::seconds(10)) == 0);
    }
    weft::run::child_processes stuck("/bin/sh");
    stuck.start(1, {"-c", "sleep 60"});
    const auto start = std::chrono::steady_clock::now();
    CHECK(stuck.reap(std::chrono::milliseconds(50)) == 1);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
    CHECK_THROWS_WITH(weft::run::child_processes("/nonexistent/weft").start(2, {}),
                      Catch::Contains("cannot start a process from /nonexistent/weft"));
}
