// weft::block_pool over a counting host memory: a freed block comes back, zeroed, for the
// next allocation of its size only; it is kept behind a fence, which only its reuse waits
// for, and without one it goes straight back; the oldest goes back past the capacity; a
// refused allocation gives the kept blocks back and is tried again; and rank threads sharing
// the pool never get the same block at once.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/core/block_pool.hpp"

namespace {

// The memory under the pool: calloc and free, counted. Its fences are numbered in the order
// made; the work before fence n has finished once `finished_through` >= n (a wait makes it
// so). `fences_available`, `refuse_next` and `wait_fails` steer it.
struct counting_memory {
    static inline std::atomic<int> allocations{0}, deallocations{0}, zeroings{0};
    static inline std::atomic<int> fences_made{0}, fences_dropped{0}, waits{0};
    static inline std::atomic<long> finished_through{0};
    static inline std::atomic<bool> fences_available{true}, refuse_next{false}, wait_fails{false};
    static void reset() {
        allocations = 0;
        deallocations = 0;
        zeroings = 0;
        fences_made = 0;
        fences_dropped = 0;
        waits = 0;
        finished_through = 0;
        fences_available = true;
        refuse_next = false;
        wait_fails = false;
    }
    static void* allocate(std::size_t bytes) {
        if (refuse_next.exchange(false)) throw std::bad_alloc();
        ++allocations;
        return std::calloc(bytes, 1);
    }
    static void deallocate(void* p, std::size_t) noexcept {
        ++deallocations;
        std::free(p);
    }
    static void zero(void* p, std::size_t bytes) {
        ++zeroings;
        std::memset(p, 0, bytes);
    }
    static void* fence() noexcept {
        if (!fences_available) return nullptr;
        return new long(++fences_made);  // NOLINT(cppcoreguidelines-owning-memory): drop frees it
    }
    static bool passed(void* f) noexcept { return *static_cast<long*>(f) <= finished_through; }
    static void wait(void* f) {
        ++waits;
        if (wait_fails) throw std::runtime_error("the device failed");
        const long n = *static_cast<long*>(f);
        long through = finished_through;
        while (through < n && !finished_through.compare_exchange_weak(through, n)) {
        }
    }
    static void drop(void* f) noexcept {
        ++fences_dropped;
        delete static_cast<long*>(f);  // NOLINT(cppcoreguidelines-owning-memory)
    }
    static weft::block_pool::memory_functions functions() {
        return {&allocate, &deallocate, &zero, &fence, &passed, &wait, &drop};
    }
};

bool all_zero(const void* p, std::size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < bytes; ++i)
        if (b[i] != 0) return false;
    return true;
}

}  // namespace

TEST_CASE("a freed block is reused, zeroed, for an allocation of its size only") {
    counting_memory::reset();
    weft::block_pool pool(counting_memory::functions(), 4);
    void* a = pool.allocate(64);
    std::memset(a, 0x5a, 64);
    pool.deallocate(a, 64);
    CHECK(pool.kept_blocks() == 1);
    void* other_size = pool.allocate(32);  // a new block: sizes are not mixed
    CHECK(other_size != a);
    CHECK(counting_memory::allocations == 2);
    void* again = pool.allocate(64);
    CHECK(again == a);
    CHECK(counting_memory::allocations == 2);
    CHECK(counting_memory::zeroings == 1);
    CHECK(all_zero(again, 64));
    CHECK(pool.kept_blocks() == 0);
    pool.deallocate(again, 64);
    pool.deallocate(other_size, 32);
    CHECK(pool.release_kept() == 2);
    CHECK(counting_memory::deallocations == 2);
}

TEST_CASE("freeing never waits; a reuse waits only for a fence that has not passed") {
    counting_memory::reset();
    weft::block_pool pool(counting_memory::functions(), 4);
    void* a = pool.allocate(64);
    void* b = pool.allocate(64);
    pool.deallocate(a, 64);  // fence 1: a's work is still queued
    pool.deallocate(b, 64);  // fence 2
    CHECK(pool.kept_blocks() == 2);
    CHECK(counting_memory::waits == 0);
    // a's work has finished, b's not: a comes back without a wait, though b was freed later.
    counting_memory::finished_through = 1;
    CHECK(pool.allocate(64) == a);
    CHECK(counting_memory::waits == 0);
    // Only b is left, its work unfinished: handing it out waits for it, then zeroes it.
    CHECK(pool.allocate(64) == b);
    CHECK(counting_memory::waits == 1);
    CHECK(counting_memory::finished_through == 2);
    CHECK(counting_memory::zeroings == 2);
    // Nothing passed: the oldest of the size is taken (its work is the likeliest done).
    pool.deallocate(a, 64);  // fence 3
    pool.deallocate(b, 64);  // fence 4
    CHECK(pool.allocate(64) == a);
    CHECK(counting_memory::finished_through == 3);
    // Every fence made is dropped once, whether its block was reused or given back.
    pool.deallocate(a, 64);
    CHECK(pool.release_kept() == 2);
    CHECK(counting_memory::fences_dropped == counting_memory::fences_made);
    CHECK(counting_memory::deallocations == 2);
}

TEST_CASE("without a fence a freed block goes straight back to the memory") {
    counting_memory::reset();
    weft::block_pool pool(counting_memory::functions(), 4);
    void* a = pool.allocate(16);
    counting_memory::fences_available = false;
    pool.deallocate(a, 16);
    CHECK(pool.kept_blocks() == 0);
    CHECK(counting_memory::deallocations == 1);
    weft::block_pool none(counting_memory::functions(), 0);  // capacity 0: a plain memory
    counting_memory::fences_available = true;
    none.deallocate(none.allocate(16), 16);
    CHECK(none.kept_blocks() == 0);
    CHECK(counting_memory::deallocations == 2);
    CHECK(counting_memory::fences_made == 0);
}

TEST_CASE("a block whose wait fails goes back to the memory and the allocation reports it") {
    counting_memory::reset();
    weft::block_pool pool(counting_memory::functions(), 4);
    pool.deallocate(pool.allocate(32), 32);
    counting_memory::wait_fails = true;
    CHECK_THROWS_WITH(pool.allocate(32), "the device failed");
    CHECK(pool.kept_blocks() == 0);
    CHECK(counting_memory::deallocations == 1);
    CHECK(counting_memory::fences_dropped == 1);
    CHECK(counting_memory::zeroings == 0);
}

TEST_CASE("past its capacity the pool gives the oldest block back") {
    counting_memory::reset();
    weft::block_pool pool(counting_memory::functions(), 2);
    void* first = pool.allocate(8);
    void* second = pool.allocate(16);
    void* third = pool.allocate(24);
    pool.deallocate(first, 8);
    pool.deallocate(second, 16);
    pool.deallocate(third, 24);
    CHECK(pool.kept_blocks() == 2);
    CHECK(counting_memory::deallocations == 1);  // `first`
    CHECK(counting_memory::fences_dropped == 1);  // its fence with it
    CHECK(pool.allocate(16) == second);
    CHECK(pool.allocate(24) == third);
    CHECK(counting_memory::allocations == 3);
    pool.deallocate(second, 16);
    pool.deallocate(third, 24);
}

TEST_CASE("a refused allocation gives the kept blocks back and asks once more") {
    counting_memory::reset();
    weft::block_pool pool(counting_memory::functions(), 4);
    pool.deallocate(pool.allocate(100), 100);
    counting_memory::refuse_next = true;
    void* p = pool.allocate(200);
    CHECK(p != nullptr);
    CHECK(pool.kept_blocks() == 0);
    CHECK(counting_memory::deallocations == 1);
    pool.deallocate(p, 200);
    // With nothing kept, the refusal is the caller's.
    CHECK(pool.release_kept() == 1);
    counting_memory::refuse_next = true;
    CHECK_THROWS_AS(pool.allocate(200), std::bad_alloc);
}

TEST_CASE("threads sharing a pool never hold the same block at once") {
    counting_memory::reset();
    constexpr int threads = 4, rounds = 2000;
    weft::block_pool pool(counting_memory::functions(), threads);  // room for every block: none evicted
    constexpr std::size_t bytes = 32;
    std::atomic<int> clashes{0}, dirty{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            for (int i = 0; i < rounds; ++i) {
                auto* block = static_cast<unsigned char*>(pool.allocate(bytes));
                if (!all_zero(block, bytes)) ++dirty;
                std::memset(block, t + 1, bytes);
                std::this_thread::yield();
                for (std::size_t j = 0; j < bytes; ++j)
                    if (block[j] != static_cast<unsigned char>(t + 1)) ++clashes;
                pool.deallocate(block, bytes);
            }
        });
    for (auto& w : workers) w.join();
    CHECK(clashes == 0);
    CHECK(dirty == 0);
    CHECK(pool.kept_blocks() <= std::size_t(threads));
    // A new block only while every other was held: at most one per thread in all the rounds.
    CHECK(counting_memory::allocations <= threads);
    pool.release_kept();
    CHECK(counting_memory::fences_dropped == counting_memory::fences_made);
}
