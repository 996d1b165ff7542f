#include <catch2/catch.hpp>

#include <signal.h>

#include "weft/comm/local.hpp"
#include "weft/run/preemption.hpp"

TEST_CASE("a signal one rank received stops every rank after the same step", "[run][preemption]") {
    const weft::run::stop_on_signals handlers;
    weft::run::detail::received_stop_signal.store(0);
    weft::comm::local::run(3, [](weft::comm::local& world) { CHECK(weft::run::agreed_stop_signal(world) == 0); });
    // A real SIGTERM reaches the handler, not the default action (which would end the test).
    REQUIRE(::raise(SIGTERM) == 0);
    CHECK(weft::run::detail::received_stop_signal.load() == SIGTERM);
    weft::comm::local::run(3, [](weft::comm::local& world) { CHECK(weft::run::agreed_stop_signal(world) == SIGTERM); });
    weft::run::detail::received_stop_signal.store(SIGINT);
    weft::comm::local::run(2, [](weft::comm::local& world) { CHECK(weft::run::agreed_stop_signal(world) == SIGINT); });
    weft::run::detail::received_stop_signal.store(0);
    CHECK(std::string(weft::run::signal_name(SIGTERM)) == "SIGTERM");
}
