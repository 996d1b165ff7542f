// The calls owed by one SWARM worker: a new call is due after the timeouts of those ahead of
// it, an answered one no longer holds the others back, and the last one clears the sum.
#include <catch2/catch.hpp>

#include "weft/swarm/owed_calls.hpp"

using weft::swarm::owed_calls;

TEST_CASE("a call is due after the timeouts of the calls owed ahead of it", "[swarm][owed]") {
    owed_calls owed;
    CHECK(owed.due_after(2.0) == 2.0);  // nothing ahead: its own timeout
    owed.add(2.0);                       // a forward
    owed.add(6.0);                       // a backward behind it
    CHECK(owed.count() == 2);
    CHECK(owed.due_after(2.0) == Approx(10.0));
    owed.settle(2.0);  // the forward answered
    CHECK(owed.due_after(2.0) == Approx(8.0));
    owed.settle(6.0);  // the last: the sum is exactly 0 again
    CHECK(owed.count() == 0);
    CHECK(owed.seconds() == 0.0);
    owed.add(0.1);
    owed.add(0.2);
    owed.clear();  // the worker died with both
    CHECK(owed.count() == 0);
    CHECK(owed.due_after(1.0) == 1.0);
}
