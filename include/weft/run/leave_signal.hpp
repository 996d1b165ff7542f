// The leave notice of an elastic run: a signal (SIGUSR1 by default, e.g. from a node's drain
// hook) tells a rank to hand its state over and leave at the next step boundary. As with the
// stop signals of run/preemption.hpp, the handler only records it; agreed_leavers() lets
// every rank learn, after the same step, which ranks were told.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/core/error.hpp"

namespace weft::run {

namespace detail {

// 1 once the leave signal has arrived and not yet been reported. A lock-free atomic is safe
// to store to from a signal handler.
inline std::atomic<int> received_leave_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" inline void record_leave_signal(int) { received_leave_signal.store(1); }

}  // namespace detail

// The signal that --leave-signal names: "USR1" (SIGUSR1), "USR2" (SIGUSR2), or "none" (0: no
// signal is a leave notice; the control file still is).
[[nodiscard]] inline int leave_signal_number(std::string_view name) {
    if (name == "USR1") return SIGUSR1;
    if (name == "USR2") return SIGUSR2;
    if (name == "none") return 0;
    throw invalid_argument("--leave-signal", name, "must be USR1, USR2 or none");
}

// Installs the leave handler for its lifetime (one per process: construct it in main() or at
// launch, for --elastic runs only: without it SIGUSR1's default action ends the process).
// A second notice is harmless, so the handler stays (no SA_RESETHAND, unlike SIGTERM's).
class leave_on_signal {
public:
    explicit leave_on_signal(int signal = SIGUSR1) : signal_(signal) {
        if (signal_ == 0) return;
        struct sigaction action {};
        action.sa_handler = detail::record_leave_signal;
        sigemptyset(&action.sa_mask);
        // SA_RESTART: system calls the signal interrupts go on instead of failing.
        action.sa_flags = SA_RESTART;
        sigaction(signal_, &action, &previous_);
    }
    // By --leave-signal's name (run::settings::leave_signal).
    explicit leave_on_signal(std::string_view name) : leave_on_signal(leave_signal_number(name)) {}
    leave_on_signal(const leave_on_signal&) = delete;
    leave_on_signal& operator=(const leave_on_signal&) = delete;
    ~leave_on_signal() {
        if (signal_ != 0) sigaction(signal_, &previous_, nullptr);
    }

    [[nodiscard]] int signal() const { return signal_; }

private:
    int signal_ = 0;
    struct sigaction previous_ {};
};

// Collective over `world`: the ranks of `world` for which `leaving` was true, sorted; every
// rank gets the same list. For a caller (or a test) that knows its own answer.
template <weft::communicator Comm>
[[nodiscard]] std::vector<int> agreed_leavers(Comm& world, bool leaving) {
    // One slot per rank: a sum of rank numbers would say nothing.
    std::vector<double> told(static_cast<std::size_t>(world.size()), 0.0);
    if (leaving) told[static_cast<std::size_t>(world.rank())] = 1;
    world.allreduce_sum(std::span<double>(told));
    std::vector<int> leavers;
    for (std::size_t rank = 0; rank < told.size(); ++rank)
        if (told[rank] > 0) leavers.push_back(static_cast<int>(rank));
    return leavers;
}

// Collective over `world`: the ranks that received the leave signal since the last call.
// A rank's notice is reset only once it has been reported, so a signal that arrives during
// the call is reported by the next one. Signals reach ranks at different moments; only this
// agreement lets every rank act after the same step. Ranks as threads share one process, so
// a signal there is every rank's.
template <weft::communicator Comm>
[[nodiscard]] std::vector<int> agreed_leavers(Comm& world) {
    int seen = detail::received_leave_signal.load();
    auto leavers = agreed_leavers(world, seen != 0);
    if (seen != 0) detail::received_leave_signal.compare_exchange_strong(seen, 0);
    return leavers;
}

// Whether `leavers` is every rank of a world of `world_size`: then no rank is left to hand
// the state to, and the run stops as for SIGTERM (a checkpoint, exit code 4). This is what
// Slurm's --signal=USR1@T does, as it signals every rank of the job.
[[nodiscard]] inline bool everyone_leaves(const std::vector<int>& leavers, int world_size) {
    return world_size > 0 && static_cast<int>(leavers.size()) >= world_size;
}

}  // namespace weft::run
