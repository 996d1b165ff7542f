// Where the buffers of a training state (core/state_vector.hpp) are allocated. Host memory
// by default; a compute backend that computes elsewhere names its own (exec::cuda: CUDA
// managed memory, which its kernels compute in and host code such as optimizers,
// checkpoints and host communicators can still read and write). The engine makes the
// training state inside a state_memory_scope of its backend's memory, so every buffer of it,
// including those a layout switch or an optimizer's first step makes later, lands there;
// nothing else has to know.
//
// A state_vector keeps the memory it was made in for its whole life (it travels with the
// buffer through moves and swaps), so freeing never depends on the scope in force then.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <new>
#include <string_view>

namespace weft {

struct state_memory {
    std::string_view name;
    // Zero-filled bytes, aligned for any scalar; throws std::bad_alloc (or a weft::error
    // saying why) when it cannot.
    void* (*allocate)(std::size_t bytes);
    void (*deallocate)(void* pointer, std::size_t bytes) noexcept;
    // Whether buffers from `paged_bytes` on are kernel mappings whose pages a layout switch
    // may give back as it empties them (release_page_range in core/state_vector.hpp).
    bool pages_releasable;
    // Allocations from this size on are paged (only where pages_releasable).
    static constexpr std::size_t paged_bytes = std::size_t{16} << 10;
    // Sets `bytes` bytes at `pointer` to zero where they live, finished when it returns (a
    // GPU's managed memory: on the GPU, so that clearing gradients moves no page to the
    // host). Null: the host's memset.
    void (*zero)(void* pointer, std::size_t bytes) = nullptr;
    // Copies `bytes` bytes from `from` to `to`, both in this memory, finished when it returns
    // (a GPU's managed memory: on the GPU, so that the copy moves no page to the host). Null:
    // the host's memcpy.
    void (*copy)(void* to, const void* from, std::size_t bytes) = nullptr;
    // Whether `deallocate` may be called while device work queued before it still uses the
    // bytes: the memory reuses or returns them only after that work (exec::cuda's fences
    // them). Where not, whoever frees what queued kernels read waits for the backend first.
    bool frees_after_queued_work = false;
    // Gives back what the memory keeps for reuse (exec::cuda: its pool's freed buffers), so
    // that sizes nobody will ask for again hold no memory. Null: it keeps nothing.
    void (*give_back_kept)() noexcept = nullptr;

    // All-zero bytes are +0 in IEEE floating point: what clearing a gradient buffer writes.
    void fill_zero(void* pointer, std::size_t bytes) const {
        if (bytes == 0) return;
        if (zero != nullptr)
            zero(pointer, bytes);
        else
            std::memset(pointer, 0, bytes);
    }
    void copy_bytes(void* to, const void* from, std::size_t bytes) const {
        if (bytes == 0) return;
        if (copy != nullptr)
            copy(to, from, bytes);
        else
            std::memcpy(to, from, bytes);
    }
    void trim() const noexcept {
        if (give_back_kept != nullptr) give_back_kept();
    }
};

namespace detail {

// Host memory: large buffers are anonymous mappings (their pages read as zero and take memory
// only once written, so a layout switch can fill a new state as its data arrives); small ones
// come from the heap, zero-filled.
inline void* host_allocate(std::size_t bytes) {
    if (bytes >= state_memory::paged_bytes) {
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        return p;
    }
    void* p = ::operator new(bytes, std::align_val_t{alignof(std::max_align_t)});
    std::memset(p, 0, bytes);
    return p;
}
inline void host_deallocate(void* p, std::size_t bytes) noexcept {
    if (bytes >= state_memory::paged_bytes)
        ::munmap(p, bytes);
    else
        ::operator delete(p, std::align_val_t{alignof(std::max_align_t)});
}

}  // namespace detail

[[nodiscard]] inline const state_memory& host_state_memory() {
    static constexpr state_memory host{"host", &detail::host_allocate, &detail::host_deallocate, true};
    return host;
}

namespace detail {
inline thread_local const state_memory* state_memory_of_thread = nullptr;
}  // namespace detail

// The memory new state buffers of this thread are made in.
[[nodiscard]] inline const state_memory& current_state_memory() {
    const state_memory* current = detail::state_memory_of_thread;
    return current != nullptr ? *current : host_state_memory();
}

// Within its lifetime, this thread's new state buffers are made in `memory` (which must
// outlive every buffer made in it). Scopes nest.
class state_memory_scope {
public:
    explicit state_memory_scope(const state_memory& memory) : previous_(detail::state_memory_of_thread) {
        detail::state_memory_of_thread = &memory;
    }
    state_memory_scope(const state_memory_scope&) = delete;
    state_memory_scope& operator=(const state_memory_scope&) = delete;
    ~state_memory_scope() { detail::state_memory_of_thread = previous_; }

private:
    const state_memory* previous_;
};

}  // namespace weft
