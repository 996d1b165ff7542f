// Freed blocks of one memory kept for the next allocation of the same size, for a memory
// whose allocation and release cost a training step a wait: exec::cuda's managed state
// memory, where cudaMallocManaged is followed by a zeroing and a wait for the whole device,
// and cudaFree waits for the device too. ZeRO makes and frees a stage's reduced-gradient
// range at every step, and ZeRO-3 its full parameters; from the pool each costs a zeroing,
// so a REDUCE_GRAD or an UNSHARD starts without the host waiting for the device.
//
// A freed block is kept only once `settle` says every use of it has finished (exec::cuda:
// a wait for the device, what cudaFree does anyway), so whoever reuses it owns it alone. At
// most `capacity` blocks are kept; past that the oldest goes back to the memory, so blocks
// of sizes no longer wanted (a layout switch's) do not stay. When the memory refuses a new
// block, the kept ones go back and it is asked once more. Thread-safe: the rank threads on
// one GPU share one pool.
#pragma once

#include <cstddef>
#include <iterator>
#include <mutex>
#include <vector>

namespace weft {

class block_pool {
public:
    // The memory under the pool, as state_memory (core/state_memory.hpp) describes one.
    struct memory_functions {
        void* (*allocate)(std::size_t bytes);  // zero-filled; throws when it cannot
        void (*deallocate)(void* pointer, std::size_t bytes) noexcept;
        void (*zero)(void* pointer, std::size_t bytes);  // finished when it returns
        bool (*settle)() noexcept;  // every use of a freed block has finished (false: unknown)
    };

    block_pool(memory_functions memory, std::size_t capacity) : memory_(memory), capacity_(capacity) {
        kept_.reserve(capacity + 1);  // so that deallocate, noexcept, never grows it
    }
    block_pool(const block_pool&) = delete;
    block_pool& operator=(const block_pool&) = delete;
    ~block_pool() { release_kept(); }

    // Zero-filled bytes: a kept block of exactly this size, zeroed again, or a new one.
    [[nodiscard]] void* allocate(std::size_t bytes) {
        if (void* reused = take(bytes)) {
            try {
                memory_.zero(reused, bytes);
            } catch (...) {
                memory_.deallocate(reused, bytes);
                throw;
            }
            return reused;
        }
        try {
            return memory_.allocate(bytes);
        } catch (...) {
            if (release_kept() == 0) throw;
        }
        return memory_.allocate(bytes);
    }

    void deallocate(void* pointer, std::size_t bytes) noexcept {
        if (pointer == nullptr) return;
        if (capacity_ == 0 || !memory_.settle()) {
            memory_.deallocate(pointer, bytes);
            return;
        }
        block oldest{};
        {
            const std::scoped_lock lock(mutex_);
            kept_.push_back({pointer, bytes});  // within the reserved capacity: does not throw
            if (kept_.size() > capacity_) {
                oldest = kept_.front();
                kept_.erase(kept_.begin());
            }
        }
        if (oldest.pointer != nullptr) memory_.deallocate(oldest.pointer, oldest.bytes);
    }

    // Gives every kept block back to the memory; returns how many there were. Under the lock
    // (rare: at exit, or when the memory refused a block), so that the kept list keeps the
    // capacity deallocate relies on.
    std::size_t release_kept() noexcept {
        const std::scoped_lock lock(mutex_);
        for (const block& b : kept_) memory_.deallocate(b.pointer, b.bytes);
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
    };

    // The most recently kept block of this size (its pages are the likeliest still where
    // they were last used), or null.
    void* take(std::size_t bytes) {
        const std::scoped_lock lock(mutex_);
        for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
            if (it->bytes != bytes) continue;
            void* pointer = it->pointer;
            kept_.erase(std::next(it).base());
            return pointer;
        }
        return nullptr;
    }

    memory_functions memory_;
    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::vector<block> kept_;  // oldest first
};

}  // namespace weft
