// retain_freed_memory: after it, a large block comes from the heap rather than from its
// own mmap, and freeing it leaves the memory with the process. Its own executable, since
// the setting is process-wide.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

#include "weft/exec/cpu_heap.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;  // the sanitizers bring their own allocator
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

TEST_CASE("retain_freed_memory keeps large blocks on the heap", "[exec][heap]") {
#if defined(__GLIBC__)
    if (sanitized) {
        WARN("sanitizer allocator: glibc's malloc settings do not apply");
        return;
    }
    REQUIRE(weft::exec::retain_freed_memory());
    constexpr std::size_t size = std::size_t(64) << 20;  // above glibc's default mmap ceiling of 32 MiB
    const auto before = mallinfo2();
    void* block = std::malloc(size);
    REQUIRE(block != nullptr);
    std::memset(block, 1, size);  // touch it, as a step's activations are
    const auto held = mallinfo2();
    CHECK(held.hblks == before.hblks);                // not a separate mmap...
    CHECK(held.arena >= before.arena + size);         // ...but part of the heap
    std::free(block);
    const auto after = mallinfo2();
    CHECK(after.arena >= before.arena + size);        // and not trimmed back to the kernel
    CHECK(after.fordblks >= before.fordblks + size);  // free for the next step to reuse
#else
    CHECK_FALSE(weft::exec::retain_freed_memory());
#endif
}
