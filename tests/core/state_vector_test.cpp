// weft::state_vector: a std::vector whose large buffers take memory page by page as they are
// written and can give pages back. What the kernel holds is read with mincore(2), so these
// tests check the memory itself, not weft's count of it.
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <vector>

#include "weft/core/state_vector.hpp"

namespace {

// Which pages of v's buffer are in memory.
std::vector<bool> resident_pages(const weft::state_vector<float>& v) {
    const std::size_t page = weft::memory_page_bytes();
    const std::size_t pages = (v.capacity() * sizeof(float) + page - 1) / page;
    std::vector<unsigned char> in(pages);
    REQUIRE(::mincore(const_cast<float*>(v.data()), pages * page, in.data()) == 0);
    std::vector<bool> out;
    for (const unsigned char c : in) out.push_back((c & 1) != 0);
    return out;
}

std::size_t count(const std::vector<bool>& pages) {
    std::size_t n = 0;
    for (const bool p : pages) n += p ? 1 : 0;
    return n;
}

}  // namespace

TEST_CASE("lazy_zeros gives zeros that take memory only where written", "[core][state_vector]") {
    const std::size_t per_page = weft::memory_page_bytes() / sizeof(float);
    auto v = weft::lazy_zeros<float>(64 * per_page);
    REQUIRE(weft::is_paged(v));
    CHECK(count(resident_pages(v)) == 0);
    v[3 * per_page + 5] = 1.0f;
    v[40 * per_page] = 2.0f;
    const auto held = resident_pages(v);
    CHECK(count(held) == 2);
    CHECK(held[3]);
    CHECK(held[40]);
    std::size_t nonzero = 0;
    for (const float x : v) nonzero += x != 0.0f ? 1 : 0;
    CHECK(nonzero == 2);
}

TEST_CASE("released pages give their memory back and read as zero", "[core][state_vector]") {
    const std::size_t per_page = weft::memory_page_bytes() / sizeof(float);
    weft::state_vector<float> v(16 * per_page, 7.0f);  // written throughout
    CHECK(count(resident_pages(v)) == 16);
    weft::release_page_range(v, 2, 3);
    const auto held = resident_pages(v);
    CHECK(count(held) == 13);
    CHECK_FALSE(held[2]);
    CHECK_FALSE(held[4]);
    CHECK(held[5]);
    weft::release_page_range(v, 15, 100);  // clipped to the buffer
    CHECK(count(resident_pages(v)) == 12);
    // Read last: a read of a released page maps the kernel's shared zero page, which
    // mincore counts as resident though it takes no memory.
    CHECK(v[2 * per_page] == 0.0f);
    CHECK(v[5 * per_page - 1] == 0.0f);
    CHECK(v[5 * per_page] == 7.0f);
    CHECK(v[2 * per_page - 1] == 7.0f);
}

// ZeRO's per-layer mode frees a layer's elements of a buffer its neighbours share.
TEST_CASE("clear_and_release zeroes a range and gives back the pages wholly inside it", "[core][state_vector]") {
    const std::size_t per_page = weft::memory_page_bytes() / sizeof(float);
    weft::state_vector<float> v(16 * per_page, 7.0f);
    // From the middle of page 2 to the middle of page 9: pages 3 to 8 go back, the rest of
    // pages 2 and 9 keeps its neighbours' values.
    const std::size_t first = 2 * per_page + per_page / 2, last = 9 * per_page + per_page / 2;
    weft::clear_and_release(v, first, last);
    const auto held = resident_pages(v);
    CHECK(count(held) == 10);
    CHECK(held[2]);
    CHECK_FALSE(held[3]);
    CHECK_FALSE(held[8]);
    CHECK(held[9]);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < v.size(); ++i) wrong += v[i] != ((i >= first && i < last) ? 0.0f : 7.0f) ? 1 : 0;
    CHECK(wrong == 0);
    // Within one page, and on a heap buffer: cleared only.
    weft::clear_and_release(v, 1, 5);
    CHECK(v[0] == 7.0f);
    CHECK(v[1] == 0.0f);
    CHECK(v[4] == 0.0f);
    CHECK(v[5] == 7.0f);
    weft::state_vector<float> small(8, 3.0f);
    weft::clear_and_release(small, 2, 100);  // clipped to the buffer
    CHECK(small[1] == 3.0f);
    CHECK(small[2] == 0.0f);
    CHECK(small[7] == 0.0f);
}

TEST_CASE("a state_vector keeps std::vector's values: resize and assign write zeros", "[core][state_vector]") {
    // Small buffers come from the heap, zeroed; resize after a shrink value-initializes
    // again, as std::vector does (lazy_zeros alone skips writing, on fresh memory).
    weft::state_vector<float> small(8, 3.0f);
    CHECK_FALSE(weft::is_paged(small));
    small.resize(2);
    small.resize(8);
    CHECK(small[5] == 0.0f);
    const std::size_t per_page = weft::memory_page_bytes() / sizeof(float);
    weft::state_vector<float> big(8 * per_page, 4.0f);
    big.resize(per_page);
    big.resize(8 * per_page);
    CHECK(big[per_page] == 0.0f);
    CHECK(big.back() == 0.0f);
    auto lazy = weft::lazy_zeros<float>(4);  // small: from the heap, still zeros
    CHECK_FALSE(weft::is_paged(lazy));
    CHECK(lazy == weft::state_vector<float>(4, 0.0f));
}
