// The communication watchdog for backends whose waits cannot give up (comm::mpi: a
// blocking MPI call has no timeout), built as PyTorch's NCCL watchdog is: the thread that
// waits publishes what it waits for in one process-wide record of atomics (wait_scope,
// a few stores per wait, no lock, no allocation), and a monitor thread, started once per
// process, looks at that record every 100 ms. A wait older than the timeout of the
// communicator that published it is reported on stderr (this rank, the operation, the peer
// by world rank, the seconds waited, the schedule action the program loop published, the
// remedy), and the process then ends with exit code 2 (std::_Exit: the waiting thread is
// inside MPI, which the monitor must not call), which makes mpirun end the job.
//
// An elastic run (--elastic under MPI's fault tolerance) sets a stall handler instead: the
// monitor calls it (comm/mpi_fault.hpp revokes every communicator, which needs
// MPI_THREAD_MULTIPLE), the stuck wait returns as comm::peer_lost, and the run recovers as
// from a crash. A wait that still does not return within its timeout after that ends the
// process as before, so a stall never becomes a hang.
//
// comm::local and comm::nccl do not use it: their waits can give up by themselves and
// throw timeout_error (weft/comm/timeout.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/comm/timeout.hpp"

namespace weft::comm {

// What a rank is executing, for a timeout report: the program loop publishes (per run) a
// context and a function that describes an item, and (per action) the item, here in
// thread-local storage (plain stores). A wait_scope copies the three into the watch record,
// so the monitor can describe the action while the waiting thread is blocked; the monitor
// calls `describe` only once it has claimed a wait, after which the waiting thread never
// returns from it, so context and item stay alive.
using describe_activity_fn = std::string (*)(const void* context, const void* item);

struct activity {
    const void* context = nullptr;
    describe_activity_fn describe = nullptr;
    const void* item = nullptr;
};

namespace detail {
inline thread_local activity current_activity{};
}  // namespace detail

// Publishes `context`/`describe` on this thread for the scope's lifetime (restoring what was
// there before); set_item names the current item, nullptr for "between items".
class activity_scope {
public:
    activity_scope(const void* context, describe_activity_fn describe) : saved_(detail::current_activity) {
        detail::current_activity = {context, describe, nullptr};
    }
    activity_scope(const activity_scope&) = delete;
    activity_scope& operator=(const activity_scope&) = delete;
    ~activity_scope() { detail::current_activity = saved_; }

    static void set_item(const void* item) noexcept { detail::current_activity.item = item; }

private:
    activity saved_;
};

// A communicator's members in MPI_COMM_WORLD's numbering, for reports. Interned and never
// freed (a few per program, one per distinct membership), so that a watch record can point
// at one without owning it.
struct watch_group {
    int world_rank = 0;            // this process
    std::vector<int> world_ranks;  // of group ranks 0..size-1

    [[nodiscard]] int world_of(int rank) const {
        return rank >= 0 && static_cast<std::size_t>(rank) < world_ranks.size()
                   ? world_ranks[static_cast<std::size_t>(rank)]
                   : rank;
    }

    [[nodiscard]] std::string members() const {
        std::string text = "over " + std::to_string(world_ranks.size()) + " ranks (world ranks ";
        const std::size_t shown = std::min<std::size_t>(world_ranks.size(), 16);
        for (std::size_t i = 0; i < shown; ++i) text += (i != 0 ? ", " : "") + std::to_string(world_ranks[i]);
        return text + (shown < world_ranks.size() ? ", ...)" : ")");
    }
};

[[nodiscard]] inline const watch_group* intern_watch_group(int world_rank, std::vector<int> world_ranks) {
    static std::mutex lock;
    static auto* groups = new std::vector<std::unique_ptr<const watch_group>>();  // never freed, on purpose
    const std::lock_guard guard(lock);
    for (const auto& g : *groups)
        if (g->world_rank == world_rank && g->world_ranks == world_ranks) return g.get();
    groups->push_back(std::make_unique<const watch_group>(watch_group{world_rank, std::move(world_ranks)}));
    return groups->back().get();
}

enum class wait_kind : int { recv, send, collective };

// One wait, as the waiting thread describes it. `operation` must be a string literal (or
// live as long as the program): for a collective its name, e.g. "allreduce_sum(float)";
// for point-to-point unused. `peer` is the group rank (point-to-point), `amount` bytes
// (point-to-point) or elements (collective; 0: none).
struct wait_info {
    const char* operation = "";
    wait_kind kind = wait_kind::collective;
    int peer = -1;
    int tag = 0;
    std::size_t amount = 0;
    const watch_group* group = nullptr;
    timeout_duration timeout = default_timeout;
};

namespace detail {

// The process-wide record: one watched wait at a time (weft calls MPI from one thread,
// MPI_THREAD_FUNNELED; a wait that finds the record taken, e.g. on a second thread of an
// MPI_THREAD_MULTIPLE program, is not watched). Constant-initialised and trivially
// destructible, so the monitor can read it during static destruction too.
struct watch_record {
    static constexpr std::int64_t idle = 0;
    static constexpr std::int64_t writing = -1;
    static constexpr std::int64_t claimed = -2;
    static constexpr std::int64_t handed_over = -3;  // the stall handler ran; the waiter releases it
    std::atomic<std::int64_t> state{idle};  // > 0: a wait is published; its start, steady-clock ns
    std::atomic<const char*> operation{""};
    std::atomic<int> kind{0};
    std::atomic<int> peer{-1};
    std::atomic<int> tag{0};
    std::atomic<std::uint64_t> amount{0};
    std::atomic<const watch_group*> group{nullptr};
    std::atomic<std::int64_t> timeout_ns{0};
    std::atomic<const void*> activity_context{nullptr};
    std::atomic<describe_activity_fn> activity_describe{nullptr};
    std::atomic<const void*> activity_item{nullptr};
};

inline watch_record watch{};
inline std::atomic<const char*> watchdog_label{"weft watchdog"};
using stall_handler = void (*)() noexcept;
inline std::atomic<stall_handler> on_stall{nullptr};

inline std::int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_clock::now().time_since_epoch()).count();
}

// The report for the claimed wait, as a timeout_error's message.
inline std::string watchdog_report(double waited_seconds) {
    const watch_record& w = watch;
    const watch_group* group = w.group.load(std::memory_order_relaxed);
    const auto kind = static_cast<wait_kind>(w.kind.load(std::memory_order_relaxed));
    const int peer = w.peer.load(std::memory_order_relaxed);
    const std::uint64_t amount = w.amount.load(std::memory_order_relaxed);
    timeout_error::details d;
    d.rank = group != nullptr ? group->world_rank : 0;
    d.waited_seconds = waited_seconds;
    d.timeout_seconds = static_cast<double>(w.timeout_ns.load(std::memory_order_relaxed)) * 1e-9;
    if (kind == wait_kind::collective) {
        d.operation = std::string(w.operation.load(std::memory_order_relaxed)) +
                      (amount != 0 ? " of " + std::to_string(amount) + " elements" : std::string()) +
                      (group != nullptr ? " " + group->members() : std::string());
    } else {
        d.operation = std::string(kind == wait_kind::recv ? "irecv(source=" : "isend(dest=") + std::to_string(peer) +
                      ", tag=" + std::to_string(w.tag.load(std::memory_order_relaxed)) + ") of " +
                      std::to_string(amount) + " bytes";
        d.peers = {group != nullptr ? group->world_of(peer) : peer};
    }
    const void* context = w.activity_context.load(std::memory_order_relaxed);
    const describe_activity_fn describe = w.activity_describe.load(std::memory_order_relaxed);
    if (context != nullptr && describe != nullptr) {
        try {
            d.action = describe(context, w.activity_item.load(std::memory_order_relaxed));
        } catch (...) {  // a report without the action is better than none
        }
    }
    return timeout_error(std::move(d)).what();
}

// The monitor: every 100 ms, is the published wait older than its timeout? Then claim it
// (the waiting thread, should its wait still return, waits in ~wait_scope for the verdict)
// and report it. With a stall handler set: call it, release the record to the waiter, and end
// the process only if the wait has not returned one more timeout later. Without: give the
// other ranks waiting on the same peer a grace of min(timeout, 10 s) to report too (in a
// collective, the rank that reported nothing is the stuck one), and end the process.
// A monitor that wakes far later than it asked (over 2 s) finds its own process was
// stopped (SIGSTOP, a debugger; mpirun continues a stopped rank to end it): the wait then
// counts from that wake-up, so a rank does not blame its peers for its own stop.
[[noreturn]] inline void watchdog_loop() {
    using namespace std::chrono_literals;
    watch_record& w = watch;
    std::int64_t last_wake = steady_ns();
    std::int64_t forgiven_start = 0;  // the wait that was published when this process was stopped
    std::int64_t counted_from = 0;    // and when its counting restarted
    std::int64_t handed_at = 0;       // when the stall handler ran for the wait still handed over
    const auto end_process = [](int rank, std::int64_t grace, const char* why) {
        std::fprintf(stderr, "%s (rank %d): %sending this process with exit code 2 in %g s\n", watchdog_label.load(),
                     rank, why, static_cast<double>(grace) * 1e-9);
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::nanoseconds(grace));
        std::fflush(nullptr);
        std::_Exit(2);
    };
    for (;;) {
        std::this_thread::sleep_for(100ms);
        const std::int64_t now = steady_ns();
        const bool was_stopped = now - last_wake > 2'000'000'000;
        last_wake = now;
        std::int64_t start = w.state.load(std::memory_order_acquire);
        if (start == watch_record::handed_over) {
            const std::int64_t timeout = w.timeout_ns.load(std::memory_order_relaxed);
            if (now - handed_at >= timeout) {
                const watch_group* group = w.group.load(std::memory_order_relaxed);
                end_process(group != nullptr ? group->world_rank : 0, 0,
                            "the stalled wait did not return after its communicators were revoked: ");
            }
            continue;
        }
        if (start <= 0) continue;
        if (was_stopped) {
            forgiven_start = start;
            counted_from = now;
        }
        const std::int64_t timeout = w.timeout_ns.load(std::memory_order_relaxed);
        const std::int64_t waited = now - (start == forgiven_start ? counted_from : start);
        if (waited < timeout) continue;
        // The wait that was published at `start` is still the one there; from now on its
        // fields cannot change (a new wait cannot publish over a claimed record).
        if (!w.state.compare_exchange_strong(start, watch_record::claimed, std::memory_order_acq_rel)) continue;
        const double seconds = static_cast<double>(waited) * 1e-9;
        const watch_group* group = w.group.load(std::memory_order_relaxed);
        const int rank = group != nullptr ? group->world_rank : 0;
        std::string report;
        try {
            report = watchdog_report(seconds);
        } catch (...) {
            report = "weft: communication timeout (the report could not be composed)";
        }
        std::fprintf(stderr, "%s (rank %d): %s\n", watchdog_label.load(), rank, report.c_str());
        if (const stall_handler handle = on_stall.load(); handle != nullptr) {
            std::fprintf(stderr, "%s (rank %d): handing the stall to the elastic recovery\n", watchdog_label.load(), rank);
            std::fflush(stderr);
            handle();
            handed_at = steady_ns();
            w.state.store(watch_record::handed_over, std::memory_order_release);
            continue;
        }
        end_process(rank, std::min<std::int64_t>(timeout, 10'000'000'000LL), "");
    }
}

}  // namespace detail

// Starts the monitor thread unless it runs already; cheap after the first call. Detached:
// it touches only the constant-initialised record, and ends with the process.
inline void start_watchdog() {
    static std::once_flag once;
    std::call_once(once, [] { std::thread(detail::watchdog_loop).detach(); });
}

// The program name the monitor's lines begin with ("weft watchdog" by default); `label`
// must live as long as the program (argv[0], a string literal).
inline void set_watchdog_label(const char* label) noexcept {
    if (label != nullptr) detail::watchdog_label.store(label);
}

// What the monitor does with a wait past its timeout: nullptr (the default) ends the process;
// a handler is called instead and must make the wait return (comm/mpi_fault.hpp's
// hand_stalls_to_recovery). Safe to change at any time.
inline void set_stall_handler(detail::stall_handler handler) noexcept { detail::on_stall.store(handler); }

// Publishes one wait for the monitor for the scope's lifetime. A wait with no_timeout is
// not published. Cost: a compare-exchange, about ten relaxed stores, a release store, a
// clock read and a compare-exchange.
class wait_scope {
public:
    explicit wait_scope(const wait_info& info) noexcept {
        if (info.timeout == no_timeout) return;
        detail::watch_record& w = detail::watch;
        std::int64_t expected = detail::watch_record::idle;
        if (!w.state.compare_exchange_strong(expected, detail::watch_record::writing, std::memory_order_acquire,
                                             std::memory_order_relaxed))
            return;
        w.operation.store(info.operation, std::memory_order_relaxed);
        w.kind.store(static_cast<int>(info.kind), std::memory_order_relaxed);
        w.peer.store(info.peer, std::memory_order_relaxed);
        w.tag.store(info.tag, std::memory_order_relaxed);
        w.amount.store(info.amount, std::memory_order_relaxed);
        w.group.store(info.group, std::memory_order_relaxed);
        w.timeout_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(info.timeout).count(),
                           std::memory_order_relaxed);
        const activity& a = detail::current_activity;
        w.activity_context.store(a.context, std::memory_order_relaxed);
        w.activity_describe.store(a.describe, std::memory_order_relaxed);
        w.activity_item.store(a.item, std::memory_order_relaxed);
        start_ = std::max<std::int64_t>(detail::steady_ns(), 1);
        w.state.store(start_, std::memory_order_release);
    }
    wait_scope(const wait_scope&) = delete;
    wait_scope& operator=(const wait_scope&) = delete;
    ~wait_scope() {
        if (start_ == 0) return;
        std::int64_t mine = start_;
        if (detail::watch.state.compare_exchange_strong(mine, detail::watch_record::idle, std::memory_order_acq_rel))
            return;
        // The monitor has claimed this wait: stay here, so that what it reads (the action)
        // stays alive, until it either ends the process or hands the stall over, after which
        // the record is this thread's to release.
        for (;;) {
            std::int64_t handed = detail::watch_record::handed_over;
            if (detail::watch.state.compare_exchange_strong(handed, detail::watch_record::idle, std::memory_order_acq_rel))
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }

private:
    std::int64_t start_ = 0;  // 0: not published
};

}  // namespace weft::comm
