// MPI's fault tolerance (ULFM, Open MPI 5's `mpirun --with-ft ulfm`) as weft sees it: a
// process failure is a comm::peer_lost error, and, once a program has asked for recovery
// (set_peer_loss_recovery), every communicator of this process is revoked the moment one
// call reports a failure.
//
// Why revoke everything: ULFM interrupts only the operations that involve the dead process.
// A pipeline rank waiting on a live neighbour that is itself stuck on the dead one would
// wait forever. Each rank that sees a failure revokes all its communicators; revocation
// interrupts every pending operation of every member of each of them, and those ranks
// revoke theirs in turn, so every survivor leaves its step with peer_lost and meets the
// others in MPIX_Comm_shrink.
//
// Built against an MPI without ULFM (Debian's Open MPI 4.1), nothing here changes what a
// failure does: an MPI error is a weft::error and the launch ends the job (exit 2).
#pragma once

#include "weft/comm/mpi_header.hpp"

#if WEFT_HAS_ULFM
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "weft/comm/peer_lost.hpp"
#include "weft/comm/watchdog.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

namespace detail {

// The communicators this process holds, to revoke them all on a failure.
class live_communicators {
public:
    static live_communicators& instance() {
        static live_communicators registry;
        return registry;
    }
    void add(MPI_Comm comm) {
        const std::lock_guard guard(lock_);
        comms_.push_back(comm);
    }
    void remove(MPI_Comm comm) {
        const std::lock_guard guard(lock_);
        const auto it = std::find(comms_.begin(), comms_.end(), comm);
        if (it != comms_.end()) comms_.erase(it);
    }
    std::vector<MPI_Comm> all() {
        const std::lock_guard guard(lock_);
        return comms_;
    }

private:
    std::mutex lock_;
    std::vector<MPI_Comm> comms_;
};

inline std::atomic<bool> recover_from_peer_loss{false};

// Whether an MPI return code reports a dead process or a revoked communicator.
[[nodiscard]] inline bool is_peer_failure([[maybe_unused]] int code) {
#if WEFT_HAS_ULFM
    int error_class = MPI_SUCCESS;
    if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) return false;
    return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING ||
           error_class == MPIX_ERR_REVOKED;
#else
    return false;
#endif
}

// Whether this process knows of a failed peer, or a revoked communicator, in any of its
// communicators: a failure some MPI calls report as another error (Open MPI's non-blocking
// collectives say MPI_ERR_OTHER when a peer of theirs died).
[[nodiscard]] inline bool any_peer_failed() {
#if WEFT_HAS_ULFM
    for (MPI_Comm comm : live_communicators::instance().all()) {
        int revoked = 0;
        if (MPIX_Comm_is_revoked(comm, &revoked) == MPI_SUCCESS && revoked != 0) return true;
        MPI_Group failed = MPI_GROUP_NULL;
        if (MPIX_Comm_get_failed(comm, &failed) != MPI_SUCCESS) continue;
        int count = 0;
        MPI_Group_size(failed, &count);
        MPI_Group_free(&failed);
        if (count > 0) return true;
    }
#endif
    return false;
}

// Revokes every live communicator of this process (ULFM only; idempotent).
inline void revoke_all_communicators() {
#if WEFT_HAS_ULFM
    for (MPI_Comm comm : live_communicators::instance().all()) {
        int revoked = 0;
        if (MPIX_Comm_is_revoked(comm, &revoked) == MPI_SUCCESS && revoked == 0) MPIX_Comm_revoke(comm);
    }
#endif
}

}  // namespace detail

// Under ULFM with recovery on, a failure reported by any MPI call revokes every communicator
// of the process (see the top of this file) before it is thrown as peer_lost. run::trainer
// turns it on for --elastic.
inline void set_peer_loss_recovery(bool on) { detail::recover_from_peer_loss.store(on); }
[[nodiscard]] inline bool peer_loss_recovery() { return detail::recover_from_peer_loss.load(); }

// Whether the watchdog can hand a stall to recovery: ULFM, and MPI_THREAD_MULTIPLE, as the
// monitor's thread revokes the communicators while the stuck thread is inside MPI.
[[nodiscard]] inline bool can_recover_from_stalls() {
    if constexpr (!has_ulfm()) return false;
    int initialized = 0, level = MPI_THREAD_SINGLE;
    if (MPI_Initialized(&initialized) != MPI_SUCCESS || initialized == 0) return false;
    return MPI_Query_thread(&level) == MPI_SUCCESS && level == MPI_THREAD_MULTIPLE;
}

// A wait past --comm-timeout, on, revokes every communicator of this process (the stuck wait
// returns as peer_lost on this rank, and on every other through the revocation) instead of
// ending the process: a stalled rank, like a dead one, becomes a recovery. Where the stalled
// rank is alive it takes part in that recovery and nothing is lost; where it stays stuck, the
// recovery's own watched waits end the run. Off: the watchdog ends the process (exit 2).
// Needs can_recover_from_stalls().
inline void hand_stalls_to_recovery(bool on) {
    comm::set_stall_handler(on ? +[]() noexcept {
        try {
            detail::revoke_all_communicators();
        } catch (...) {  // nothing revoked: the monitor ends the process one timeout later
        }
    }
                               : nullptr);
}

}  // namespace weft::comm
