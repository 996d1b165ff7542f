// comm::mpi's non-blocking collectives without a blocking start. Mismatched lengths or roots
// make MPI truncate, hang or misread silently, so every collective is preceded by an
// agreement on them (a 4-element MPI_Iallreduce of max(x) and max(-x)); for a non-blocking
// one the agreement is itself non-blocking, and the collective is posted once it has
// completed and found every rank's lengths equal: at the latest by the request's wait(),
// and usually sooner, because every call into weft's MPI communicators (on any of them,
// e.g. a pipeline's sends while a data-parallel reduction is pending) tests the pending
// agreements and posts what they allow. A mismatch is then the same error on every rank, at
// its wait(), and no rank posts that collective.
//
// MPI needs the collectives of a communicator started in the same order on every rank. So a
// communicator's deferred collectives are settled in the order they were started, and every
// other collective it starts (blocking or not) first settles those before it: its agreement,
// then its collective, then the next one's agreement, on every rank alike, whenever each
// rank's tests happen to find an agreement done.
#pragma once

#include "weft/comm/mpi_header.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/mpi_errors.hpp"
#include "weft/comm/watchdog.hpp"

namespace weft::comm::detail {

// One non-blocking collective, from its agreement to the collective's request.
struct deferred_collective {
    std::int64_t agreement[4] = {};  // count, -count, root, -root; max-reduced in place
    MPI_Request agreeing = MPI_REQUEST_NULL;
    std::function<int(MPI_Request*)> post;  // starts the collective itself (MPI_I...)
    const char* post_call = "";             // what a failed post names
    wait_info info;                         // what a wait for it is, for the watchdog
    bool settled = false;                   // the agreement is done: posted, or refused
    MPI_Request running = MPI_REQUEST_NULL;  // the collective, once posted
    std::string refusal;                    // why it was not posted (a mismatch, a failed call)
    bool peer_failed = false;               // the call failed because a peer died (mpi_fault.hpp)
};

// Makes `c`'s agreement settle it, waiting for it when `block` (else only when it is done
// already); false when not done.
inline bool settle(deferred_collective& c, bool block) {
    if (c.settled) return true;
    int code = MPI_SUCCESS;
    if (block) {
        const wait_scope watched(c.info);
        code = MPI_Wait(&c.agreeing, MPI_STATUS_IGNORE);
    } else {
        int done = 0;
        code = MPI_Test(&c.agreeing, &done, MPI_STATUS_IGNORE);
        if (code == MPI_SUCCESS && done == 0) return false;
    }
    c.settled = true;
    c.agreeing = MPI_REQUEST_NULL;
    try {
        mpi_check(code, "MPI_Iallreduce (length check)");
    } catch (const peer_lost& e) {
        c.refusal = e.what();
        c.peer_failed = true;
        return true;
    } catch (const error& e) {
        c.refusal = e.what();
        return true;
    }
    const auto* v = c.agreement;
    if (v[0] != -v[1]) {
        c.refusal = "collective mismatch: ranks called " + std::string(c.info.operation) + " with lengths from " +
                    std::to_string(-v[1]) + " to " + std::to_string(v[0]) + " (this rank: " +
                    std::to_string(c.info.amount) + "); every rank of a group must pass the same length";
    } else if (v[2] != -v[3]) {
        c.refusal = "collective mismatch: ranks called " + std::string(c.info.operation) + " with roots from " +
                    std::to_string(-v[3]) + " to " + std::to_string(v[2]) + "; every rank must pass the same root";
    } else {
        const int posted = c.post(&c.running);
        if (posted != MPI_SUCCESS) {
            c.running = MPI_REQUEST_NULL;
            try {
                mpi_check(posted, c.post_call);
            } catch (const peer_lost& e) {
                c.refusal = e.what();
                c.peer_failed = true;
            } catch (const error& e) {
                c.refusal = e.what();
            }
        }
    }
    c.post = nullptr;  // what it captured (the buffers) is the request's again
    return true;
}

// One communicator's deferred collectives that are not settled yet, in the order started.
class deferred_queue {
public:
    void push(std::shared_ptr<deferred_collective> c) { unsettled_.push_back(std::move(c)); }

    // Settles, in order, what is done already; stops at the first that is not.
    void progress() {
        while (!unsettled_.empty() && settle(*unsettled_.front(), false)) unsettled_.pop_front();
    }
    // Settles everything up to and including `last` (everything when null), waiting as needed.
    void settle_through(const deferred_collective* last = nullptr) {
        while (!unsettled_.empty()) {
            const std::shared_ptr<deferred_collective> front = unsettled_.front();
            settle(*front, true);
            unsettled_.pop_front();
            if (front.get() == last) return;
        }
    }

private:
    std::deque<std::shared_ptr<deferred_collective>> unsettled_;
};

// Every communicator's queue in this process, so that a call on any one moves them all on.
// MPI is called from one thread (MPI_THREAD_FUNNELED); the lock keeps the list itself whole
// should a program share communicators between threads that take turns.
class deferred_registry {
public:
    static deferred_registry& instance() {
        static deferred_registry registry;
        return registry;
    }
    void add(const std::shared_ptr<deferred_queue>& queue) {
        const std::lock_guard guard(lock_);
        std::erase_if(queues_, [](const auto& q) { return q.expired(); });
        queues_.push_back(queue);
    }
    // Posts every pending collective whose agreement is done; never waits.
    void progress() {
        const std::lock_guard guard(lock_);
        for (const auto& weak : queues_)
            if (const auto queue = weak.lock()) queue->progress();
    }

private:
    std::mutex lock_;
    std::vector<std::weak_ptr<deferred_queue>> queues_;
};

}  // namespace weft::comm::detail
