// The fault flags of a SWARM run (swarm/fault_flags.hpp): --fail, --stall, --slow and --join
// words become worker_faults and joins by worker id, each refusal names the flag, the word
// and its form, and with --spawn every id is checked against the workers the run starts.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/fault_flags.hpp"

using weft::swarm::worker_faults;

namespace {

using fault_words = std::vector<std::string>;

std::string fault_refusal(const fault_words& fails, const fault_words& stalls, const fault_words& slows,
                          const fault_words& joins) {
    try {
        (void)weft::swarm::parse_fault_plan(fails, stalls, slows, joins);
    } catch (const weft::error& e) {
        return e.what();
    }
    return "(accepted)";
}

}  // namespace

TEST_CASE("fault fault_words become each worker's faults and the joins", "[swarm][fault_flags]") {
    const auto plan = weft::swarm::parse_fault_plan({"1@2:forward", "4@4:backward", "6@0"}, {"0@3:3", "4@1:0.5"},
                                                    {"5:3", "4:1.5"}, {"7@3", "8@0"});
    REQUIRE(plan.faults.size() == 5);
    const auto& w1 = plan.faults.at(1);
    CHECK(w1.fail_step == 2);
    CHECK(w1.fail_phase == worker_faults::phase::forward);
    CHECK(w1.stall_step == -1);
    CHECK(w1.slow_factor == 1);
    const auto& w4 = plan.faults.at(4);  // one worker, three kinds of fault
    CHECK(w4.fail_step == 4);
    CHECK(w4.fail_phase == worker_faults::phase::backward);
    CHECK(w4.stall_step == 1);
    CHECK(w4.stall_seconds == 0.5);
    CHECK(w4.slow_factor == 1.5);
    CHECK(plan.faults.at(6).fail_step == 0);
    CHECK(plan.faults.at(6).fail_phase == worker_faults::phase::any);
    CHECK(plan.faults.at(0).stall_step == 3);
    CHECK(plan.faults.at(0).stall_seconds == 3);
    CHECK(plan.faults.at(0).fail_step == -1);
    CHECK(plan.faults.at(5).slow_factor == 3);
    CHECK(plan.joins == std::map<long long, long long>{{7, 3}, {8, 0}});
    const auto none = weft::swarm::parse_fault_plan({}, {}, {}, {});
    CHECK(none.faults.empty());
    CHECK(none.joins.empty());
}

TEST_CASE("bad fault fault_words are refused with the flag, the word and its form", "[swarm][fault_flags]") {
    const std::string fail_form = "must read W@STEP[:forward|backward] with non-negative integers W and STEP";
    CHECK(fault_refusal({"1"}, {}, {}, {}) == "weft: --fail = \"1\" is invalid: must read W@STEP[:forward|backward]");
    CHECK(fault_refusal({"x@2"}, {}, {}, {}) == "weft: --fail = \"x@2\" is invalid: " + fail_form);
    CHECK(fault_refusal({"1@-2"}, {}, {}, {}) == "weft: --fail = \"1@-2\" is invalid: " + fail_form);
    CHECK(fault_refusal({"1@2:"}, {}, {}, {}) ==
          "weft: --fail = \"1@2:\" is invalid: the phase after the colon must be forward or backward");
    CHECK(fault_refusal({"1@2:sideways"}, {}, {}, {}) ==
          "weft: --fail = \"1@2:sideways\" is invalid: the phase after the colon must be forward or backward");
    CHECK(fault_refusal({}, {"0@3"}, {}, {}) == "weft: --stall = \"0@3\" is invalid: must read W@STEP:SECONDS");
    CHECK(fault_refusal({}, {"0:3@1"}, {}, {}) == "weft: --stall = \"0:3@1\" is invalid: must read W@STEP:SECONDS");
    CHECK(fault_refusal({}, {"0@3x:3"}, {}, {}) ==
          "weft: --stall = \"0@3x:3\" is invalid: must read W@STEP:SECONDS with non-negative integers W and STEP");
    for (const std::string seconds : {"0", "-1", "inf", "nan", "2s", ""})
        CHECK(fault_refusal({}, {"0@3:" + seconds}, {}, {}) ==
              "weft: --stall = \"0@3:" + seconds + "\" is invalid: needs a positive number after the colon");
    CHECK(fault_refusal({}, {}, {"5"}, {}) == "weft: --slow = \"5\" is invalid: must read W:FACTOR");
    CHECK(fault_refusal({}, {}, {"w:2"}, {}) ==
          "weft: --slow = \"w:2\" is invalid: must read W:FACTOR with non-negative integers W and STEP");
    CHECK(fault_refusal({}, {}, {"5:0.5"}, {}) == "weft: --slow = \"5:0.5\" is invalid: FACTOR must be at least 1");
    CHECK(fault_refusal({}, {}, {"5:x"}, {}) ==
          "weft: --slow = \"5:x\" is invalid: needs a positive number after the colon");
    CHECK(fault_refusal({}, {}, {}, {"7"}) == "weft: --join = \"7\" is invalid: must read W@STEP");
    CHECK(fault_refusal({}, {}, {}, {"7@"}) ==
          "weft: --join = \"7@\" is invalid: must read W@STEP with non-negative integers W and STEP");
    CHECK(fault_refusal({}, {}, {}, {"5@2", "5@3"}) == "weft: --join = \"5@3\" is invalid: names worker 5 twice");
}

TEST_CASE("with --spawn, faults and joins must name workers the run starts", "[swarm][fault_flags]") {
    using weft::swarm::check_spawned;
    using weft::swarm::parse_fault_plan;
    // 2 stages x 2 workers: 0..3 at once; 5 joins.
    CHECK_NOTHROW(check_spawned(parse_fault_plan({"3@1"}, {"0@1:2"}, {"5:2"}, {"5@2"}), 4));
    CHECK_THROWS_WITH(check_spawned(parse_fault_plan({}, {}, {}, {"0@2"}), 4),
                      "weft: --join = \"0@2\" is invalid: must name a new worker: --spawn starts workers 0..3");
    CHECK_THROWS_WITH(check_spawned(parse_fault_plan({"9@2"}, {}, {}, {}), 4),
                      "weft: --fail, --stall or --slow worker = 9 is invalid: is not a worker this run starts: "
                      "--spawn starts workers 0..3 and the --join ids");
}
