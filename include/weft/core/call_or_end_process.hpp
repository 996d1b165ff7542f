// A last call that may wait for good on something outside the program, bounded: past the
// bound the whole process ends. For MPI_Finalize after a run that survived a lost peer
// (comm::mpi_environment::finalize_within): the work is done and written by then, and a
// process that never ends holds its node and its job.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

namespace weft {

// Calls `call`; should it not return within `bound`, prints "weft: <what> did not return
// within N ms; ending the process" and ends the process with `exit_code` (std::_Exit, after
// flushing stdout and stderr: no destructors run, as the call still holds the main thread).
template <class Call>
void call_or_end_process(std::chrono::milliseconds bound, int exit_code, const char* what, Call&& call) {
    std::mutex lock;
    std::condition_variable returned_signal;
    bool returned = false;
    std::thread guard([&] {
        std::unique_lock held(lock);
        if (returned_signal.wait_for(held, bound, [&] { return returned; })) return;
        std::fprintf(stderr, "weft: %s did not return within %lld ms; ending the process\n", what,
                     static_cast<long long>(bound.count()));
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(exit_code);
    });
    std::forward<Call>(call)();
    {
        const std::lock_guard held(lock);
        returned = true;
    }
    returned_signal.notify_one();
    guard.join();
}

}  // namespace weft
