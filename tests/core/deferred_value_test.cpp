// weft::deferred_value: a value already there reads as itself; a deferred one runs its read
// once, at the first read of it or of any copy, and keeps what it gave.
#include <catch2/catch.hpp>

#include "weft/core/deferred_value.hpp"

TEST_CASE("a deferred value is read once, when first read, and then kept") {
    int reads = 0;
    const auto v = weft::deferred_value<float>::when_read([&reads] {
        ++reads;
        return 2.5f;
    });
    CHECK(v.pending());
    CHECK(reads == 0);  // handing it out reads nothing
    CHECK(v.get() == 2.5f);
    CHECK(reads == 1);
    CHECK_FALSE(v.pending());
    const float as_float = v;  // the conversion reads the kept value
    CHECK(as_float == 2.5f);
    CHECK(static_cast<double>(v) / 2 == 1.25);
    CHECK(reads == 1);
}

TEST_CASE("a value already there is never pending") {
    const weft::deferred_value<float> v = 0.75f;
    CHECK_FALSE(v.pending());
    CHECK(v.get() == 0.75f);
    CHECK(weft::deferred_value<float>().get() == 0.0f);
}

TEST_CASE("copies share one read") {
    int reads = 0;
    const auto v = weft::deferred_value<int>::when_read([&reads] { return ++reads; });
    const auto copy = v;
    CHECK(copy.pending());
    CHECK(copy.get() == 1);
    CHECK_FALSE(v.pending());  // the copy's read was its read too
    CHECK(v.get() == 1);
    CHECK(reads == 1);
}
