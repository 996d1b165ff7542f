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
    // Ends the owner's device work; must not throw, must be safe to call again, and may run on
    // another thread than the owner's.
    using abort_fn = void (*)(void* owner) noexcept;

    static abort_on_timeout& registry() {
        static abort_on_timeout instance;
        return instance;
    }

    void add(void* owner, int device, abort_fn abort) {
        const std::scoped_lock lock(mutex_);
        entries_.push_back({owner, device, abort});
    }
    // After it returns, no abort of `owner` runs (an abort in progress on another thread
    // finishes first): call it before the owner goes.
    void remove(void* owner) {
        const std::scoped_lock lock(mutex_);
        std::erase_if(entries_, [owner](const entry& e) { return e.owner == owner; });
    }

    // Aborts every registered owner on `device`, all at once; returns how many.
    //
    // At once, each on a thread of its own: ncclCommAbort sets its communicator's abort flag
    // and then waits for that communicator's streams, which may wait (through the compute
    // stream) for another communicator's kernel that only that one's abort ends. One after
    // the other, the first abort could wait for ever for the second.
    int abort_all(int device) {
        const std::scoped_lock lock(mutex_);
        std::vector<std::thread> aborting;
        int aborted = 0;
        for (const entry& e : entries_) {
            if (e.device != device) continue;
            ++aborted;
            try {
                aborting.emplace_back([e] { e.abort(e.owner); });
            } catch (...) {  // no thread to be had: on this one, which is all that is left
                e.abort(e.owner);
            }
        }
        for (std::thread& t : aborting) t.join();
        return aborted;
    }

    [[nodiscard]] int registered(int device) const {
        const std::scoped_lock lock(mutex_);
        return static_cast<int>(std::count_if(entries_.begin(), entries_.end(),
                                              [device](const entry& e) { return e.device == device; }));
    }

private:
    abort_on_timeout() = default;
    struct entry {
        void* owner;
        int device;
        abort_fn abort;
    };
    mutable std::mutex mutex_;
    std::vector<entry> entries_;
};

}  // namespace weft::comm
