#include <catch2/catch.hpp>

#include <signal.h>

#include <string>
#include <vector>

#include "weft/comm/local.hpp"
#include "weft/run/leave_signal.hpp"

TEST_CASE("the leave signal: recorded, agreed by every rank, reported once", "[run][elastic]") {
    const weft::run::leave_on_signal handler("USR1");
    CHECK(handler.signal() == SIGUSR1);
    weft::run::detail::received_leave_signal.store(0);
    weft::comm::local::run(3, [](weft::comm::local& world) { CHECK(weft::run::agreed_leavers(world).empty()); });
    // A real SIGUSR1 reaches the handler, not the default action (which would end the test).
    REQUIRE(::raise(SIGUSR1) == 0);
    CHECK(weft::run::detail::received_leave_signal.load() == 1);
    // Ranks as threads share the process, so the signal is every rank's: the run would stop.
    weft::comm::local::run(3, [](weft::comm::local& world) {
        const auto leavers = weft::run::agreed_leavers(world);
        CHECK(leavers == std::vector<int>{0, 1, 2});
        CHECK(weft::run::everyone_leaves(leavers, world.size()));
        CHECK(weft::run::agreed_leavers(world).empty());  // reported: reset
    });
    CHECK(weft::run::detail::received_leave_signal.load() == 0);
    // A second notice does not end the process (the handler stays).
    REQUIRE(::raise(SIGUSR1) == 0);
    CHECK(weft::run::detail::received_leave_signal.load() == 1);
    weft::run::detail::received_leave_signal.store(0);
}

TEST_CASE("the leave signal: some ranks told, every rank learns which", "[run][elastic]") {
    weft::comm::local::run(3, [](weft::comm::local& world) {
        const auto leavers = weft::run::agreed_leavers(world, world.rank() == 1);
        CHECK(leavers == std::vector<int>{1});
        CHECK_FALSE(weft::run::everyone_leaves(leavers, world.size()));
        CHECK(weft::run::agreed_leavers(world, world.rank() != 1) == std::vector<int>{0, 2});
    });
}

TEST_CASE("the leave signal by name", "[run][elastic]") {
    CHECK(weft::run::leave_signal_number("USR1") == SIGUSR1);
    CHECK(weft::run::leave_signal_number("USR2") == SIGUSR2);
    CHECK(weft::run::leave_signal_number("none") == 0);
    try {
        (void)weft::run::leave_signal_number("TERM");
        FAIL("TERM was accepted as a leave signal");
    } catch (const weft::error& e) {
        CHECK(std::string(e.what()).find("--leave-signal = \"TERM\" is invalid: must be USR1, USR2 or none") !=
              std::string::npos);
    }
    const weft::run::leave_on_signal none("none");
    CHECK(none.signal() == 0);
}
