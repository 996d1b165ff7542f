// The preemption agreement: SIGTERM (what Slurm sends before it kills a job) and SIGINT
// (Ctrl-C) do not kill the process; they are recorded, and the trainer stops after the step
// it is in, once every rank has agreed to, so it can save a checkpoint that is whole. A
// second signal ends the process at once (the handler resets itself).
#pragma once

#include <signal.h>

#include <atomic>
#include <span>

#include "weft/comm/communicator.hpp"

namespace weft::run {

namespace detail {

// The signal received, or 0. A lock-free atomic is safe to store to from a signal handler.
inline std::atomic<int> received_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" inline void record_stop_signal(int signal) { received_stop_signal.store(signal); }

}  // namespace detail

// Installs the handlers for its lifetime (one per process: construct it in main()).
class stop_on_signals {
public:
    stop_on_signals() {
        struct sigaction action {};
        action.sa_handler = detail::record_stop_signal;
        sigemptyset(&action.sa_mask);
        // SA_RESETHAND: the second signal has the default effect and ends the process.
        // SA_RESTART: system calls interrupted by the first one go on instead of failing.
        action.sa_flags = SA_RESETHAND | SA_RESTART;
        sigaction(SIGTERM, &action, &previous_term_);
        sigaction(SIGINT, &action, &previous_int_);
    }
    stop_on_signals(const stop_on_signals&) = delete;
    stop_on_signals& operator=(const stop_on_signals&) = delete;
    ~stop_on_signals() {
        sigaction(SIGTERM, &previous_term_, nullptr);
        sigaction(SIGINT, &previous_int_, nullptr);
    }

private:
    struct sigaction previous_term_ {};
    struct sigaction previous_int_ {};
};

[[nodiscard]] inline const char* signal_name(int signal) {
    switch (signal) {
        case SIGTERM: return "SIGTERM";
        case SIGINT: return "SIGINT";
        default: return "a signal";
    }
}

// Collective over `world`: the stop signal any rank has received (SIGTERM before SIGINT,
// if ranks got different ones), or 0. Signals reach ranks at different moments, so only this
// agreement lets every rank stop after the same step.
template <weft::communicator Comm>
[[nodiscard]] int agreed_stop_signal(Comm& world) {
    // One count per signal: a sum of signal numbers would say nothing.
    double seen[2] = {0, 0};
    const int mine = detail::received_stop_signal.load();
    if (mine == SIGTERM) seen[0] = 1;
    if (mine == SIGINT) seen[1] = 1;
    world.allreduce_sum(std::span<double>(seen));
    if (seen[0] > 0) return SIGTERM;
    if (seen[1] > 0) return SIGINT;
    return 0;
}

}  // namespace weft::run
