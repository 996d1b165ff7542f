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
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace weft {

namespace detail {
// Set while lazy_zeros() sizes a fresh buffer: the new elements keep the zeros allocate() gave.
inline thread_local bool keep_allocated_zeros = false;
}  // namespace detail

template <class T>
class state_allocator {
public:
    using value_type = T;
    // Allocations from this size on are mapped from the kernel, page-aligned, committed as written.
    static constexpr std::size_t paged_bytes = std::size_t{16} << 10;

    state_allocator() = default;
    template <class U>
    explicit(false) state_allocator(const state_allocator<U>& /*other*/) noexcept {}

    [[nodiscard]] T* allocate(std::size_t n) {
        const std::size_t bytes = n * sizeof(T);
        if (bytes >= paged_bytes) {
            void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) throw std::bad_alloc();
            return static_cast<T*>(p);
        }
        void* p = ::operator new(bytes, std::align_val_t{alignof(T)});
        std::memset(p, 0, bytes);
        return static_cast<T*>(p);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        const std::size_t bytes = n * sizeof(T);
        if (bytes >= paged_bytes)
            ::munmap(p, bytes);
        else
            ::operator delete(p, std::align_val_t{alignof(T)});
    }

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

    friend bool operator==(const state_allocator&, const state_allocator&) noexcept { return true; }
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
    return v.capacity() * sizeof(T) >= state_allocator<T>::paged_bytes;
}

// `n` zeros, of which a paged buffer commits none until they are written.
template <class T>
[[nodiscard]] state_vector<T> lazy_zeros(std::size_t n) {
    static_assert(std::is_trivially_default_constructible_v<T>);
    state_vector<T> out;
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

}  // namespace weft
