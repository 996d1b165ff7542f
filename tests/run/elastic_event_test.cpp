#include <catch2/catch.hpp>

#include <string>

#include "weft/run/elastic_event.hpp"

namespace {

weft::run::elastic_event elastic_test_leave_event() {
    weft::run::elastic_event e;
    e.kind = weft::run::elastic_event_kind::leave;
    e.step = 7;
    e.ranks = {1, 3};
    e.from = "pp 2 x dp 2";
    e.to = "pp 2 x dp 1";
    e.world_from = 4;
    e.world_to = 2;
    e.bytes_moved = 3 * 1024 * 1024 / 2;
    e.seconds_to_training = 0.12;
    return e;
}

}  // namespace

TEST_CASE("an elastic event's line", "[run][elastic]") {
    auto e = elastic_test_leave_event();
    CHECK(weft::run::format_elastic_event(e) ==
          "elastic | leave | before step 7 | ranks 1,3 | world 4 -> 2 | from pp 2 x dp 2 | to pp 2 x dp 1 | "
          "moved 1.5 MiB | 120.0 ms to training");
    e.kind = weft::run::elastic_event_kind::failure;
    e.ranks = {2, 3, 4};
    e.phases.detect = 0.001;
    e.phases.restore_from_checkpoint = 0.0802;
    CHECK(weft::run::format_elastic_event(e) ==
          "elastic | failure | before step 7 | ranks 2-4 | world 4 -> 2 | from pp 2 x dp 2 | to pp 2 x dp 1 | "
          "moved 1.5 MiB | 120.0 ms to training (detect 1.0 ms, restore_from_checkpoint 80.2 ms)");
    CHECK(std::string(weft::run::elastic_event_name(weft::run::elastic_event_kind::join)) == "join");
}

TEST_CASE("an elastic event's JSON object", "[run][elastic]") {
    auto e = elastic_test_leave_event();
    CHECK(weft::run::elastic_event_json(e).dump() ==
          R"({"event":"leave","step":7,"ranks":[1,3],"from":"pp 2 x dp 2","to":"pp 2 x dp 1","world_from":4,)"
          R"("world_to":2,"moved_bytes":1572864,"milliseconds":120.0})");
    e.kind = weft::run::elastic_event_kind::join;
    e.ranks = {4};
    e.phases.agree = 0.002;
    e.phases.move = 0.5;
    const auto json = weft::run::elastic_event_json(e);
    CHECK(json["event"] == "join");
    CHECK(json["phase_milliseconds"].dump() == R"({"agree":2.0,"move":500.0})");
}

TEST_CASE("a join's event names the boundary it was asked at and its overlapped start", "[run][elastic]") {
    auto e = elastic_test_leave_event();
    e.kind = weft::run::elastic_event_kind::join;
    e.step = 41;
    e.asked_step = 6;
    e.ranks = {2, 3};
    e.phases.start_joiners = 1.3016;
    e.phases.prepare_layout = 0.0502;
    e.phases.build = 0.1;
    e.bytes_made_ahead = 3 * 1024 * 1024;
    CHECK(weft::run::format_elastic_event(e) ==
          "elastic | join | before step 41 (asked before step 6) | ranks 2-3 | world 4 -> 2 | from pp 2 x dp 2 | "
          "to pp 2 x dp 1 | moved 1.5 MiB (into 3.0 MiB made ahead) | 120.0 ms to training (start_joiners 1301.6 ms, "
          "prepare_layout 50.2 ms, build 100.0 ms)");
    const auto json = weft::run::elastic_event_json(e);
    CHECK(json["asked_before_step"] == 6);
    CHECK(json["made_ahead_bytes"] == 3 * 1024 * 1024);
    CHECK(json["phase_milliseconds"].size() == 3);
    CHECK(json["phase_milliseconds"]["start_joiners"].get<double>() == Approx(1301.6));
    CHECK(json["phase_milliseconds"]["prepare_layout"].get<double>() == Approx(50.2));
    CHECK(json["phase_milliseconds"]["build"].get<double>() == Approx(100.0));
}
