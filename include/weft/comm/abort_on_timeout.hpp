// What a timed-out wait on a GPU ends: every communicator whose work on that GPU only an
// abort can stop (comm::nccl: a kernel waiting for a peer that never comes spins until
// ncclCommAbort). Such communicators register here for their lifetime; a wait that gives up
// (comm::nccl's host waits, exec::cuda's wait limit, weft/exec/cuda/wait_limit.hpp) aborts
// all of them on its device before it throws, as PyTorch's watchdog aborts every
// communicator of the process.
//
// Why all of them, not only the one that timed out: the streams of one GPU wait on each
// other (a communicator's stream joins the compute stream, which waits for other groups'
// receives), and freeing device memory waits for the whole device. One communicator left
// stuck would hold the rest of the shutdown (the engine's buffers, the other groups'
// destruction) for ever; with all of them aborted, every stream drains and the error can
// reach the launcher, which ends the job.
//
// Host code only (no CUDA): the registry keys entries by device number.
#pragma once

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

namespace weft::comm {

class abort_on_timeout {
public:
    // Ends the owner's device work; must not throw, must be safe to call again, must not call
    // the registry, and may run on another thread than the owner's (while the owner waits).
    using abort_fn = void (*)(void* owner) noexcept;
    // Whether the owner has no device work in flight; must not throw or call the registry.
    using idle_fn = bool (*)(void* owner) noexcept;

    struct member {
        void* owner = nullptr;
        int device = 0;
        abort_fn abort = nullptr;
        idle_fn idle = nullptr;  // null: never has work in flight
    };

    // One for the process, never destroyed, so that an owner destroyed during the program's
    // exit still finds it.
    static abort_on_timeout& registry() {
        static auto& instance = *new abort_on_timeout();  // NOLINT(cppcoreguidelines-owning-memory)
        return instance;
    }

    void add(void* owner, int device, abort_fn abort, idle_fn idle = nullptr) {
        const std::scoped_lock lock(mutex_);
        members_.push_back({owner, device, abort, idle});
    }
    // After it returns, no abort of `owner` runs (an abort in progress on another thread
    // finishes first): call it before the owner goes.
    void remove(void* owner) {
        const std::scoped_lock lock(mutex_);
        std::erase_if(members_, [owner](const member& m) { return m.owner == owner; });
    }

    // Aborts every registered owner on `device`, and `also` (an owner that has left the
    // registry, such as a communicator being destroyed), all at once; returns how many.
    //
    // At once, each on a thread of its own: ncclCommAbort sets its communicator's abort flag
    // and then waits for that communicator's streams, which may wait (through the compute
    // stream) for another communicator's kernel that only that one's abort ends. One after
    // the other, the first abort could wait for ever for the second.
    int abort_all(int device, const member* also = nullptr) {
        const std::scoped_lock lock(mutex_);
        std::vector<std::thread> aborting;
        int aborted = 0;
        const auto start = [&aborting, &aborted](const member& m) {
            ++aborted;
            try {
                aborting.emplace_back([m] { m.abort(m.owner); });
            } catch (...) {  // no thread to be had: on this one, which is all that is left
                m.abort(m.owner);
            }
        };
        for (const member& m : members_)
            if (m.device == device) start(m);
        if (also != nullptr) start(*also);
        for (std::thread& t : aborting) t.join();
        return aborted;
    }

    // Whether no registered owner on `device` has work in flight: before something that
    // waits for the whole GPU (freeing device memory), which would otherwise wait for a
    // communicator stuck on a peer.
    [[nodiscard]] bool all_idle(int device) const {
        const std::scoped_lock lock(mutex_);
        return std::all_of(members_.begin(), members_.end(), [device](const member& m) {
            return m.device != device || m.idle == nullptr || m.idle(m.owner);
        });
    }

    [[nodiscard]] int registered(int device) const {
        const std::scoped_lock lock(mutex_);
        return static_cast<int>(std::count_if(members_.begin(), members_.end(),
                                              [device](const member& m) { return m.device == device; }));
    }

private:
    abort_on_timeout() = default;
    mutable std::mutex mutex_;
    std::vector<member> members_;
};

}  // namespace weft::comm
