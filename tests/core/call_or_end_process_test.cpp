#include "weft/core/call_or_end_process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

namespace {

// Runs `body` in a child process and returns its exit status (-1: it did not exit normally).
template <class Body>
int exit_status_of(Body body) {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        body();
        std::_Exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("call_or_end_process ends the process with the code when the call waits past the bound", "[core]") {
    const auto started = std::chrono::steady_clock::now();
    const int status = exit_status_of([] {
        weft::call_or_end_process(std::chrono::milliseconds(50), 7, "a call that waits",
                                  [] { std::this_thread::sleep_for(std::chrono::seconds(30)); });
        std::_Exit(9);  // never reached: the guard ends the process first
    });
    CHECK(status == 7);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
}

TEST_CASE("call_or_end_process returns after a call that returns within the bound", "[core]") {
    const int status = exit_status_of([] {
        bool called = false;
        weft::call_or_end_process(std::chrono::seconds(30), 7, "a quick call", [&] { called = true; });
        std::_Exit(called ? 3 : 4);
    });
    CHECK(status == 3);
}
