// A wait that can give up: asks `done()` until it says yes or a deadline passes. Used where
// the blocking wait a library offers has no limit (cudaStreamSynchronize, cudaEventSynchronize),
// so that work stuck behind a peer that never comes (a receive, a collective) ends a run with
// an error instead of holding it for ever.
//
// The query runs first, so something already done is never reported as late, and it may
// throw (a failed stream, an asynchronous communication error): the error leaves the wait.
// The loop spins for the first polls (a short wait returns at once), then yields its core,
// and after a millisecond sleeps briefly between polls, so a long wait does not keep a core
// busy that another rank thread in the process could use; that adds at most about a tenth
// of a millisecond to a wait that already took one.
#pragma once

#include <chrono>
#include <thread>

namespace weft {

// Whether done() became true before `deadline` (steady_clock::time_point::max() waits for
// ever). done() is called at least once.
template <class Done>
[[nodiscard]] bool poll_until(Done&& done, std::chrono::steady_clock::time_point deadline) {
    using clock = std::chrono::steady_clock;
    constexpr int spinning_polls = 64;
    constexpr auto yielding_time = std::chrono::milliseconds(1);
    constexpr auto pause = std::chrono::microseconds(50);
    const auto start = clock::now();
    for (int polls = 0;; ++polls) {
        if (done()) return true;
        const auto now = clock::now();
        if (now >= deadline) return false;
        if (polls < spinning_polls) continue;
        if (now - start < yielding_time)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(pause);
    }
}

}  // namespace weft
