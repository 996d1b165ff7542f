// Memory spaces: host and device are spaces and each reaches only itself (what the engine's
// compile-time pairing of communicator and backend rests on).
#include "weft/core/memory_space.hpp"

#include <catch2/catch.hpp>

#include <type_traits>

TEST_CASE("host and device spaces reach only themselves", "[core][memory_space]") {
    STATIC_REQUIRE(weft::memory_space<weft::host_space>);
    STATIC_REQUIRE(weft::memory_space<weft::device_space>);
    STATIC_REQUIRE_FALSE(weft::memory_space<int>);
    STATIC_REQUIRE(weft::accessible_from<weft::host_space, weft::host_space>);
    STATIC_REQUIRE(weft::accessible_from<weft::device_space, weft::device_space>);
    STATIC_REQUIRE_FALSE(weft::accessible_from<weft::host_space, weft::device_space>);
    STATIC_REQUIRE_FALSE(weft::accessible_from<weft::device_space, weft::host_space>);
    CHECK(weft::host_space::name == "host");
    CHECK(weft::device_space::name == "device");
}
