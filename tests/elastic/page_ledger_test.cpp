// The page ledger a layout switch keeps for each buffer: which pages hold memory, checked
// against what the kernel holds (mincore(2)) and against the meter's count.
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <vector>

#include "weft/core/state_vector.hpp"
#include "weft/elastic/page_ledger.hpp"

namespace {

using weft::elastic::detail::memory_meter;
using weft::elastic::detail::page_ledger;

std::size_t resident_pages(const weft::state_vector<float>& v) {
    const std::size_t page = weft::memory_page_bytes();
    const std::size_t pages = (v.capacity() * sizeof(float) + page - 1) / page;
    std::vector<unsigned char> in(pages);
    REQUIRE(::mincore(const_cast<float*>(v.data()), pages * page, in.data()) == 0);
    std::size_t n = 0;
    for (const unsigned char c : in) n += c & 1;
    return n;
}

}  // namespace

TEST_CASE("a filling ledger counts each page once, as it is first written", "[elastic][memory]") {
    const std::size_t page = weft::memory_page_bytes();
    const std::size_t per_page = page / sizeof(float);
    auto buffer = weft::lazy_zeros<float>(32 * per_page);
    memory_meter meter;
    auto ledger = page_ledger<float>::filling(buffer, meter);
    CHECK(meter.now() == 0);
    // Elements from the middle of page 1 to the middle of page 3: pages 1, 2 and 3.
    const std::size_t first = per_page + per_page / 2;
    const std::size_t count = 2 * per_page;
    ledger.written(first, count);
    for (std::size_t i = first; i < first + count; ++i) buffer[i] = 1.0f;
    CHECK(meter.now() == 3 * page);
    CHECK(resident_pages(buffer) == 3);
    ledger.written(first, 10);  // again: no new page
    CHECK(meter.now() == 3 * page);
    ledger.forget();
    CHECK(meter.now() == 0);
    CHECK(meter.peak() == 3 * page);
}

TEST_CASE("an emptying ledger gives a page back after its last announced read", "[elastic][memory]") {
    const std::size_t page = weft::memory_page_bytes();
    const std::size_t per_page = page / sizeof(float);
    weft::state_vector<float> buffer(16 * per_page, 1.0f);
    memory_meter meter;
    meter.add(weft::elastic::detail::state_buffer_bytes(buffer));
    auto ledger = page_ledger<float>::emptying(buffer, meter);
    ledger.will_read(0, 4 * per_page);  // pages 0-3, read by two readers
    ledger.will_read(0, 4 * per_page);
    ledger.will_read(4 * per_page, 4 * per_page);  // pages 4-7, by one
    ledger.release_unread();                        // pages 8-15: nobody reads them
    CHECK(meter.now() == 8 * page);
    CHECK(resident_pages(buffer) == 8);
    ledger.read(4 * per_page, 4 * per_page);
    CHECK(meter.now() == 8 * page);  // counted until handed back
    CHECK(resident_pages(buffer) == 8);
    ledger.give_back();
    CHECK(meter.now() == 4 * page);
    CHECK(resident_pages(buffer) == 4);
    ledger.read(0, 4 * per_page);  // the first reader: pages 0-3 stay
    ledger.give_back();
    CHECK(meter.now() == 4 * page);
    CHECK(resident_pages(buffer) == 4);
    ledger.read(0, 2 * per_page);  // the second, in two parts
    ledger.give_back();
    CHECK(meter.now() == 2 * page);
    ledger.read(2 * per_page, 2 * per_page);
    ledger.give_back();
    CHECK(meter.now() == 0);
    CHECK(resident_pages(buffer) == 0);
    ledger.forget();
    CHECK(meter.now() == 0);
}

TEST_CASE("a heap buffer is held whole until its last read", "[elastic][memory]") {
    weft::state_vector<float> buffer(100, 1.0f);
    REQUIRE_FALSE(weft::is_paged(buffer));
    memory_meter meter;
    meter.add(weft::elastic::detail::state_buffer_bytes(buffer));
    auto ledger = page_ledger<float>::emptying(buffer, meter);
    ledger.will_read(0, 60);
    ledger.will_read(60, 40);
    ledger.release_unread();
    CHECK(meter.now() == 400);
    ledger.read(0, 60);
    CHECK(meter.now() == 400);
    ledger.read(60, 40);
    CHECK(meter.now() == 0);
    CHECK(buffer[10] == 1.0f);  // a heap buffer keeps its values: only the count changes
}
