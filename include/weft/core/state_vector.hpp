// The buffers of a training state (flat parameters and gradients, ZeRO ranges, optimizer
// moments): std::vectors whose large allocations come straight from the kernel, so that a
// layout switch can hold an old and a new state without both being whole in memory.
//
// A large allocation (at least `paged_bytes`) is an anonymous mapping: its pages read as zero
// and take memory only once written. A switch fills a new buffer made by `lazy_zeros()` as
// data arrives, and gives each page of an old buffer back (`release_pages()`) once nothing is
// left to read from it, so the memory it holds follows the data it has, page by page. Small
// allocations come from the heap, zero-filled. Otherwise a state_vector behaves as a
// std::vector: resize() and assign() write the values they are given.
//
// That is host memory. A buffer is made in its thread's current state memory
// (core/state_memory.hpp): a GPU backend's state lives where its kernels compute, and only
// host memory gives pages back.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/core/state_memory.hpp"

namespace weft {

namespace detail {
// Set while lazy_zeros() sizes a fresh buffer: the new elements keep the zeros allocate() gave.
inline thread_local bool keep_allocated_zeros = false;
}  // namespace detail

template <class T>
class state_allocator {
public:
    using value_type = T;
    // The memory travels with the buffer: a moved, swapped or assigned state_vector frees
    // its buffer where it was made.
    using propagate_on_container_copy_assignment = std::true_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    using is_always_equal = std::false_type;
    // Allocations from this size on are mapped from the kernel, page-aligned, committed as
    // written (in host memory; see core/state_memory.hpp).
    static constexpr std::size_t paged_bytes = state_memory::paged_bytes;

    // In this thread's current state memory (core/state_memory.hpp).
    state_allocator() noexcept : memory_(&current_state_memory()) {}
    explicit state_allocator(const state_memory& memory) noexcept : memory_(&memory) {}
    template <class U>
    explicit(false) state_allocator(const state_allocator<U>& other) noexcept : memory_(&other.memory()) {}

    [[nodiscard]] T* allocate(std::size_t n) { return static_cast<T*>(memory_->allocate(n * sizeof(T))); }
    void deallocate(T* p, std::size_t n) noexcept { memory_->deallocate(p, n * sizeof(T)); }

    [[nodiscard]] const state_memory& memory() const noexcept { return *memory_; }

    // Value-initializes, as std::allocator does, except inside lazy_zeros(), where the
    // memory is fresh from allocate() and already zero.
    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        if constexpr (std::is_trivially_default_constructible_v<U>) {
            if (detail::keep_allocated_zeros) {
                ::new (static_cast<void*>(p)) U;
                return;
            }
        }
        ::new (static_cast<void*>(p)) U();
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }

    template <class U>
    friend bool operator==(const state_allocator& a, const state_allocator<U>& b) noexcept {
        return &a.memory() == &b.memory();
    }

private:
    const state_memory* memory_;
};

template <class T>
using state_vector = std::vector<T, state_allocator<T>>;

// The page size memory is committed and given back in.
[[nodiscard]] inline std::size_t memory_page_bytes() {
    static const std::size_t bytes = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return bytes;
}

// Whether `v`'s buffer is mapped from the kernel (committed page by page) rather than heap.
template <class T>
[[nodiscard]] bool is_paged(const state_vector<T>& v) {
    return v.get_allocator().memory().pages_releasable && v.capacity() * sizeof(T) >= state_allocator<T>::paged_bytes;
}

// `n` zeros in `memory`, of which a paged buffer commits none until they are written.
template <class T>
[[nodiscard]] state_vector<T> lazy_zeros(std::size_t n, const state_memory& memory = current_state_memory()) {
    static_assert(std::is_trivially_default_constructible_v<T>);
    state_vector<T> out{state_allocator<T>(memory)};
    detail::keep_allocated_zeros = true;
    try {
        out.resize(n);
    } catch (...) {
        detail::keep_allocated_zeros = false;
        throw;
    }
    detail::keep_allocated_zeros = false;
    return out;
}

// Gives pages [first_page, first_page + pages) of a paged buffer back to the kernel; they
// then read as zero and take memory again only when written: for data that has been moved
// away. Does nothing to a heap buffer.
template <class T>
void release_page_range(state_vector<T>& v, std::size_t first_page, std::size_t pages) {
    if (!is_paged(v) || pages == 0) return;
    const std::size_t page = memory_page_bytes();
    const std::size_t mapped = (v.capacity() * sizeof(T) + page - 1) / page;
    if (first_page >= mapped) return;
    pages = std::min(pages, mapped - first_page);
    ::madvise(reinterpret_cast<std::byte*>(v.data()) + first_page * page, pages * page, MADV_DONTNEED);
}

// Sets elements [first, last) of `v` to zero and gives back the pages that lie wholly inside
// them (release_page_range): what a layer's parameters or gradients took, once they are used
// up, while the elements around them stay as they are. Pages shared with a neighbour are
// only cleared. A heap buffer is only cleared.
template <class T>
void clear_and_release(state_vector<T>& v, std::size_t first, std::size_t last) {
    last = std::min(last, v.size());
    if (first >= last) return;
    const std::size_t page = memory_page_bytes();
    const auto base = reinterpret_cast<std::uintptr_t>(v.data());
    const std::uintptr_t begin = base + first * sizeof(T);
    const std::uintptr_t end = base + last * sizeof(T);
    const std::uintptr_t inner_begin = (begin + page - 1) / page * page;
    const std::uintptr_t inner_end = end / page * page;
    if (!is_paged(v) || inner_begin >= inner_end) {
        v.get_allocator().memory().fill_zero(v.data() + first, (last - first) * sizeof(T));
        return;
    }
    // The partial pages at either end hold a neighbour's elements too: zero ours only.
    std::memset(reinterpret_cast<void*>(begin), 0, inner_begin - begin);
    std::memset(reinterpret_cast<void*>(inner_end), 0, end - inner_end);
    release_page_range(v, (inner_begin - base) / page, (inner_end - inner_begin) / page);
}

}  // namespace weft
