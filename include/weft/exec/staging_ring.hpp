// Host values a device reads after the call that queued the copy has returned (token ids,
// labels), staged through a ring of buffers the copy engine can read directly. From pageable
// memory a CUDA copy is not asynchronous: the driver may wait for the stream first, so
// each small upload would stop the host until the GPU caught up. Staged here, the copy is
// queued behind the kernels like any other, and the caller's memory may be reused at once.
//
// Buffers are used in turn; before one is written again, the host waits for the copy that
// last read it (a fence recorded behind that copy), which by then has nearly always finished.
// A buffer grows to the largest value it has carried (to a power of two, at least 4 KiB).
//
// Platform (exec::cuda's: weft/exec/cuda/pinned_uploads.hpp) provides:
//   void* allocate(std::size_t bytes);                  // throws when it cannot
//   void deallocate(void* buffer) noexcept;
//   void copy_async(void* to, const void* staged, std::size_t bytes);
//   typename Platform::fence;                           // default-constructible, movable
//   void record(fence&);                                // behind the copies queued so far
//   void wait(fence&);                                  // until they have finished
// One ring per stream and thread: it is not thread-safe.
#pragma once

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::exec {

template <class Platform>
class staging_ring {
public:
    explicit staging_ring(Platform platform, std::size_t buffers = 16) : platform_(std::move(platform)) {
        require(buffers >= 1, "staging_ring: buffers", buffers, "must be at least 1");
        slots_.resize(buffers);
    }
    staging_ring(const staging_ring&) = delete;
    staging_ring& operator=(const staging_ring&) = delete;
    staging_ring(staging_ring&& other) noexcept
        : platform_(std::move(other.platform_)), slots_(std::exchange(other.slots_, {})), next_(other.next_) {}
    staging_ring& operator=(staging_ring&& other) noexcept {
        if (this != &other) {
            release_all();
            platform_ = std::move(other.platform_);
            slots_ = std::exchange(other.slots_, {});
            next_ = other.next_;
        }
        return *this;
    }
    ~staging_ring() { release_all(); }

    // Stages `bytes` from `from` and queues their copy to `to`. `from` may be reused as soon
    // as it returns; `to` holds the values once the platform's queue has reached the copy.
    void copy(void* to, const void* from, std::size_t bytes) {
        if (bytes == 0) return;
        require(!slots_.empty(), "staging_ring", "moved from", "must be a ring that owns its buffers");
        slot& s = slots_[next_];
        next_ = (next_ + 1) % slots_.size();
        if (s.pending) {
            platform_.wait(s.done);
            s.pending = false;
        }
        if (s.capacity < bytes) {
            const std::size_t capacity = grown_capacity(bytes);
            void* grown = platform_.allocate(capacity);
            if (s.buffer != nullptr) platform_.deallocate(s.buffer);
            s.buffer = grown;
            s.capacity = capacity;
        }
        std::memcpy(s.buffer, from, bytes);
        platform_.copy_async(to, s.buffer, bytes);
        platform_.record(s.done);
        s.pending = true;
    }

    [[nodiscard]] Platform& platform() { return platform_; }

private:
    struct slot {
        void* buffer = nullptr;
        std::size_t capacity = 0;
        typename Platform::fence done{};
        bool pending = false;  // a copy from `buffer` may still be reading it
    };

    static std::size_t grown_capacity(std::size_t bytes) {
        std::size_t capacity = 4096;
        while (capacity < bytes) capacity *= 2;
        return capacity;
    }

    // Waits for each slot's copy and frees its buffer (the platform may report nothing from
    // here: a destructor). Once a wait fails (a failing device, or a wait past its limit), a
    // buffer whose copy may still read it is left allocated rather than freed under that
    // copy, and the other slots are not waited for: each wait would fail the same way, after
    // as long.
    void release_all() noexcept {
        bool waits_fail = false;
        for (slot& s : slots_) {
            if (s.buffer == nullptr) continue;
            if (s.pending && !waits_fail) {
                try {
                    platform_.wait(s.done);
                    s.pending = false;
                } catch (...) {
                    waits_fail = true;
                }
            }
            if (!s.pending) platform_.deallocate(s.buffer);
            s.buffer = nullptr;
        }
    }

    Platform platform_;
    std::vector<slot> slots_;
    std::size_t next_ = 0;
};

}  // namespace weft::exec
