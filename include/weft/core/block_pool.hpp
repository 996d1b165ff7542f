// Freed blocks of one memory kept for the next allocation of the same size, for a memory
// whose allocation and release cost a training step a wait: exec::cuda's managed state
// memory, where cudaMallocManaged is followed by a zeroing and a wait for the whole device,
// and cudaFree waits for the device too. ZeRO makes and frees a stage's reduced-gradient
// range at every step, and ZeRO-3 its full parameters; from the pool each costs a zeroing,
// so a REDUCE_GRAD or an UNSHARD starts without the host waiting for the device.
//
// A block may be freed while work queued before the free still uses it (kernels reading
// ZeRO-3's parameters when RESHARD frees them): the pool marks that work with a fence (on a
// GPU, an event on each stream) and waits for the fence only when it hands the block out
// again, preferring a block whose fence has passed, so neither the free nor, mostly, the
// reuse waits. Whoever reuses a block owns it alone. When the memory cannot make a fence,
// the block goes straight back to the memory. At most `capacity` blocks are kept; past that
// the oldest goes back, so blocks of sizes no longer wanted (a layout switch's) do not
// stay. When the memory refuses a new block, the kept ones go back and it is asked once
// more. Thread-safe: the rank threads on one GPU share one pool.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace weft {

class block_pool {
public:
    // The memory under the pool, as state_memory (core/state_memory.hpp) describes one.
    struct memory_functions {
        void* (*allocate)(std::size_t bytes);  // zero-filled; throws when it cannot
        // Safe while queued work still uses the block: it frees only after that (cudaFree
        // waits for the device).
        void (*deallocate)(void* pointer, std::size_t bytes) noexcept;
        void (*zero)(void* pointer, std::size_t bytes);  // finished when it returns
        // A fence after every use of the memory so far, or null when the memory cannot make
        // one; `passed` says, without waiting, whether that work has finished; `wait` waits for
        // it (throwing when it cannot); `drop` frees the fence.
        void* (*fence)() noexcept;
        bool (*passed)(void* fence) noexcept;
        void (*wait)(void* fence);
        void (*drop)(void* fence) noexcept;
    };

    block_pool(memory_functions memory, std::size_t capacity) : memory_(memory), capacity_(capacity) {
        kept_.reserve(capacity + 1);  // so that deallocate, noexcept, never grows it
    }
    block_pool(const block_pool&) = delete;
    block_pool& operator=(const block_pool&) = delete;
    ~block_pool() { release_kept(); }

    // Zero-filled bytes: a kept block of exactly this size, zeroed again once the work before
    // its free has finished, or a new one.
    [[nodiscard]] void* allocate(std::size_t bytes) {
        if (const block reused = take(bytes); reused.pointer != nullptr) {
            try {
                if (!reused.passed) memory_.wait(reused.fence);
                memory_.drop(reused.fence);
            } catch (...) {
                memory_.drop(reused.fence);
                memory_.deallocate(reused.pointer, bytes);
                throw;
            }
            try {
                memory_.zero(reused.pointer, bytes);
            } catch (...) {
                memory_.deallocate(reused.pointer, bytes);
                throw;
            }
            return reused.pointer;
        }
        try {
            return memory_.allocate(bytes);
        } catch (...) {
            if (release_kept() == 0) throw;
        }
        return memory_.allocate(bytes);
    }

    // May be called while work queued before it still uses the block (see the top).
    void deallocate(void* pointer, std::size_t bytes) noexcept {
        if (pointer == nullptr) return;
        void* fence = capacity_ == 0 ? nullptr : memory_.fence();
        if (fence == nullptr) {
            memory_.deallocate(pointer, bytes);
            return;
        }
        block oldest{};
        {
            const std::scoped_lock lock(mutex_);
            kept_.push_back({pointer, bytes, fence});  // within the reserved capacity: does not throw
            if (kept_.size() > capacity_) {
                oldest = kept_.front();
                kept_.erase(kept_.begin());
            }
        }
        give_back(oldest);
    }

    // Gives every kept block back to the memory; returns how many there were. Under the lock
    // (rare: at exit, or when the memory refused a block), so that the kept list keeps the
    // capacity deallocate relies on.
    std::size_t release_kept() noexcept {
        const std::scoped_lock lock(mutex_);
        for (const block& b : kept_) give_back(b);
        const std::size_t released = kept_.size();
        kept_.clear();
        return released;
    }

    [[nodiscard]] std::size_t kept_blocks() const {
        const std::scoped_lock lock(mutex_);
        return kept_.size();
    }

private:
    struct block {
        void* pointer = nullptr;
        std::size_t bytes = 0;
        void* fence = nullptr;  // after the work that used it before its free
        bool passed = false;    // that work had finished when take() looked
    };

    // A kept block of this size, taken out of the pool, or an empty one: the most recently
    // kept whose fence has passed (its pages are the likeliest still where they were last
    // used), else the oldest (its work the likeliest to finish first).
    block take(std::size_t bytes) {
        const std::scoped_lock lock(mutex_);
        auto chosen = kept_.end();
        for (auto it = kept_.end(); it != kept_.begin();) {
            --it;
            if (it->bytes != bytes) continue;
            chosen = it;
            if (memory_.passed(it->fence)) {
                it->passed = true;
                break;
            }
        }
        if (chosen == kept_.end()) return {};
        const block taken = *chosen;
        kept_.erase(chosen);
        return taken;
    }

    // Back to the memory, which waits for the block's work as it frees it (cudaFree does).
    void give_back(const block& b) noexcept {
        if (b.pointer == nullptr) return;
        memory_.drop(b.fence);
        memory_.deallocate(b.pointer, b.bytes);
    }

    memory_functions memory_;
    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::vector<block> kept_;  // oldest first
};

}  // namespace weft
