// weft::state_memory: a thread's state buffers are made in the memory its innermost
// state_memory_scope names (host memory outside any), and each buffer stays with the memory
// it was made in through moves, swaps and copies, so it is freed where it came from.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "weft/core/state_memory.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/nn/flat_parameters.hpp"

namespace {

// Heap memory that counts what it hands out and takes back.
struct counted {
    static inline std::size_t live_bytes = 0;
    static inline int allocations = 0;
    static void* allocate(std::size_t bytes) {
        void* p = std::calloc(bytes, 1);
        live_bytes += bytes;
        ++allocations;
        return p;
    }
    static void deallocate(void* p, std::size_t bytes) noexcept {
        live_bytes -= bytes;
        std::free(p);
    }
};
const weft::state_memory counting{"counting", &counted::allocate, &counted::deallocate, false};

}  // namespace

TEST_CASE("state buffers are made in the current scope's memory and freed there", "[core][state_memory]") {
    CHECK(&weft::current_state_memory() == &weft::host_state_memory());
    const std::size_t live_before = counted::live_bytes;
    weft::state_vector<float> outside(100000);
    {
        const weft::state_memory_scope scope(counting);
        CHECK(&weft::current_state_memory() == &counting);
        weft::state_vector<float> inside(1000, 2.0f);
        CHECK(counted::live_bytes == live_before + 1000 * sizeof(float));
        CHECK(&inside.get_allocator().memory() == &counting);
        // Not paged: only host mappings give pages back.
        weft::state_vector<float> large = weft::lazy_zeros<float>(100000);
        CHECK_FALSE(weft::is_paged(large));
        CHECK(large[99999] == 0.0f);
        weft::release_page_range(large, 0, 10);  // does nothing, and does not fail
        CHECK(weft::is_paged(outside));

        // Moved into a buffer made in host memory, it keeps its memory and is freed there.
        outside = std::move(inside);
        CHECK(&outside.get_allocator().memory() == &counting);
        CHECK(outside.size() == 1000);
        {
            const weft::state_memory_scope nested(weft::host_state_memory());
            CHECK(&weft::current_state_memory() == &weft::host_state_memory());
        }
        CHECK(&weft::current_state_memory() == &counting);
    }
    CHECK(&weft::current_state_memory() == &weft::host_state_memory());
    // Copies stay where the original is; swaps carry each buffer's memory with it.
    const weft::state_vector<float> copy = outside;
    CHECK(&copy.get_allocator().memory() == &counting);
    weft::state_vector<float> host(10, 1.0f);
    std::swap(host, outside);
    CHECK(&host.get_allocator().memory() == &counting);
    CHECK(&outside.get_allocator().memory() == &weft::host_state_memory());
    host = weft::state_vector<float>();  // a host buffer replaces it: the counted one is freed
    CHECK(&host.get_allocator().memory() == &weft::host_state_memory());
    CHECK(counted::live_bytes == live_before + 1000 * sizeof(float));  // `copy`'s alone
}

TEST_CASE("a stage's flat buffers made in a scope live in its memory", "[core][state_memory]") {
    weft::parameter_registry registry;
    registry.add("w", {64, 64});
    const int before = counted::allocations;
    std::optional<weft::nn::flat_parameters<float>> tensors;
    {
        const weft::state_memory_scope scope(counting);
        tensors.emplace(registry);
    }
    CHECK(counted::allocations == before + 2);  // parameters and gradients
    CHECK(&tensors->parameter_storage().get_allocator().memory() == &counting);
    // Released and allocated again outside any scope (as ZeRO does between steps), the
    // buffers come back in the memory they were made in.
    tensors->release_gradients();
    tensors->release_parameters();
    tensors->allocate_gradients();
    tensors->allocate_parameters();
    CHECK(counted::allocations == before + 4);
    CHECK(&tensors->parameter_storage().get_allocator().memory() == &counting);
}

TEST_CASE("each thread has its own current state memory", "[core][state_memory]") {
    const weft::state_memory_scope scope(counting);
    const weft::state_memory* seen = nullptr;
    std::thread other([&] { seen = &weft::current_state_memory(); });
    other.join();
    CHECK(seen == &weft::host_state_memory());
    CHECK(&weft::current_state_memory() == &counting);
}
