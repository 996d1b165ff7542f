// The SWARM router: interleaved weighted round-robin over a stage's workers by the time of
// each class of call, with joins at the current minimum, a trial of each worker's first calls
// of each class, probes of workers passed over, bans, timeouts that follow each worker's
// estimates, and a clear error when no worker is live.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/router.hpp"

using weft::swarm::call_class;
using weft::swarm::router;
using weft::swarm::router_options;
using weft::swarm::worker_id;

namespace {

std::map<weft::swarm::worker_id, int> count_picks(router& r, int calls) {
    std::map<weft::swarm::worker_id, int> counts;
    for (int i = 0; i < calls; ++i) ++counts[r.pick_or_throw()];
    return counts;
}

}  // namespace

TEST_CASE("calls go to workers in proportion to their speed, interleaved", "[swarm][router]") {
    router r(0);
    r.join(1);
    r.join(2);
    r.finished(1, 1.0);  // worker 1 takes 1 s a call, worker 2 takes 2 s
    r.finished(2, 2.0);
    const auto counts = count_picks(r, 300);
    CHECK(counts.at(1) >= 198);
    CHECK(counts.at(1) <= 202);
    // Equal workers interleave: at no point has one had more than one call over the other
    // (ties go in random order, so a worker may get two in a row across a tie).
    router even(0);
    even.join(7);
    even.join(8);
    std::map<weft::swarm::worker_id, int> so_far{{7, 0}, {8, 0}};
    for (int i = 0; i < 40; ++i) {
        ++so_far[even.pick_or_throw()];
        CHECK(std::abs(so_far[7] - so_far[8]) <= 1);
    }
}

TEST_CASE("a call moves its worker's turn on by the time of its class", "[swarm][router]") {
    // Two equal workers whose backwards take three times their forwards. Whichever takes a
    // backward has three forwards' work to do: the next three forwards go to the other, and
    // then the two are level again. (One EMA over both classes would move them on by the same
    // amount, and alternate them.)
    router r(0, {.trial_calls = 1});
    r.join(1);
    r.join(2);
    for (const worker_id id : {1, 2}) {
        r.finished(id, 1.0, call_class::forward);
        r.finished(id, 3.0, call_class::backward);
    }
    for (int round = 0; round < 5; ++round) {
        INFO("round " << round);
        const worker_id busy = r.pick_or_throw(call_class::backward);  // level: either may take it
        const worker_id other = busy == 1 ? 2 : 1;
        for (int forward = 0; forward < 3; ++forward) CHECK(r.pick_or_throw(call_class::forward) == other);
    }
}

TEST_CASE("the trial is per class of call, and timeouts follow the class", "[swarm][router]") {
    router r(0, {.timeout_multiple = 4, .timeout_floor_seconds = 0.1, .trial_calls = 2});
    r.join(1);
    CHECK(r.expected_seconds(1, call_class::backward) == Approx(1.0));  // initial_seconds, not measured yet
    r.finished(1, 0.5, call_class::forward);
    // A backward not timed yet is expected to take what the worker's calls took so far.
    CHECK(r.expected_seconds(1, call_class::backward) == Approx(0.5));
    r.finished(1, 1.5, call_class::backward);
    // Each class's trial keeps its own fastest call: a fast forward is no measure of a backward.
    CHECK(r.expected_seconds(1, call_class::forward) == Approx(0.5));
    CHECK(r.expected_seconds(1, call_class::backward) == Approx(1.5));
    CHECK(r.expected_seconds(1) == Approx(0.5));  // the fastest of all calls in the trial
    CHECK(r.timeout_seconds(1, call_class::forward) == Approx(2.0));
    CHECK(r.timeout_seconds(1, call_class::backward) == Approx(6.0));
    // A timeout's penalty reaches every class the worker was timed in.
    r.timed_out(1);
    CHECK(r.expected_seconds(1, call_class::forward) == Approx(1.0));
    CHECK(r.expected_seconds(1, call_class::backward) == Approx(3.0));
    CHECK(*r.class_seconds(1, call_class::backward) == Approx(3.0));
}

TEST_CASE("a call timed at 0 s is an estimate of 0 s, not an unmeasured worker", "[swarm][router]") {
    // Worker 2 takes 0.5 s a call; worker 1 was timed at 0 s. Were that taken for "not
    // measured" (the guess, 2 s), worker 2 would take most calls.
    router r(0, {.initial_seconds = 2.0, .trial_calls = 1, .probe_after = 8});
    r.join(1);
    r.join(2);
    r.finished(1, 0.0);
    r.finished(2, 0.5);
    CHECK(r.is_measured(1));
    const auto counts = count_picks(r, 15);  // under 8 x 2 picks: no probe yet
    CHECK(counts.at(1) >= 14);               // it costs the pool no time (a tie may go to 2 once)
    CHECK(r.expected_seconds(1) == 0.0);
    CHECK(r.expected_seconds(1, call_class::forward) == 0.0);
    CHECK(count_picks(r, 10).count(2) == 1);  // passed over, worker 2 still gets its probe
}

TEST_CASE("the trial corrects a worker's place by what its pick was charged", "[swarm][router]") {
    router r(0, {.initial_seconds = 1.0, .trial_calls = 2, .probe_after = 100});
    r.join(1);
    REQUIRE(r.pick_or_throw(call_class::backward) == 1);  // charged the guess: 1 s
    r.join(2);                                            // enters level with worker 1's charge
    r.finished(1, 0.1, call_class::forward);              // a forward it was not picked for here
    r.finished(1, 0.3, call_class::backward);             // the backward: 0.3 s, 0.7 s less than charged
    r.finished(2, 0.1, call_class::forward);
    // Worker 1 is 0.7 s behind worker 2 now, seven of its 0.1 s forwards. (Corrected from the
    // estimate when the call came back, 0.1 s, it would have been moved on, not back.)
    for (int i = 0; i < 6; ++i) {
        INFO("forward " << i);
        CHECK(r.pick_or_throw(call_class::forward) == 1);
    }
}

TEST_CASE("a timeout ends the trial of a class not timed yet", "[swarm][router]") {
    router r(0, {.ema_weight = 0.2, .initial_seconds = 1.0, .timeout_penalty = 2});
    r.join(1);
    r.join(2);
    r.timed_out(1);  // its first call: nothing timed yet, the guess doubled
    CHECK(r.expected_seconds(1, call_class::forward) == Approx(2.0));
    CHECK(r.expected_seconds(1, call_class::backward) == Approx(2.0));
    CHECK(*r.class_seconds(1, call_class::backward) == Approx(2.0));
    // A fast call after it is blended into the penalty, not taken as the trial's first.
    r.finished(1, 0.1, call_class::forward);
    CHECK(r.expected_seconds(1, call_class::forward) == Approx(0.8 * 2.0 + 0.2 * 0.1));
    CHECK(r.expected_seconds(1, call_class::backward) == Approx(2.0));
}

TEST_CASE("a worker back from a ban is timed afresh", "[swarm][router]") {
    router r(0, {.initial_seconds = 1.0, .timeout_multiple = 4, .timeout_floor_seconds = 0.5});
    r.failed(9);  // died while fetching its state, before it ever joined
    CHECK(r.times_banned(9) == 1);
    CHECK(r.timeout_seconds(9) == Approx(4.0));  // the guess, not a zero estimate at the floor
    r.join(9);
    r.finished(9, 0.5, call_class::forward);
    r.finished(9, 1.5, call_class::backward);
    r.failed(9);
    r.join(9);  // perhaps another process on other hardware: its old times are not its own
    CHECK_FALSE(r.class_seconds(9, call_class::forward).has_value());
    CHECK_FALSE(r.class_seconds(9, call_class::backward).has_value());
}

TEST_CASE("a worker that joins enters at the current minimum", "[swarm][router]") {
    router r(0);
    r.join(1);
    r.join(2);
    (void)count_picks(r, 100);  // the pool's virtual times are far along
    r.join(3);
    const auto counts = count_picks(r, 30);
    // Without entering at the minimum it would take the next 30 calls or so; it takes its share.
    CHECK(counts.at(3) >= 9);
    CHECK(counts.at(3) <= 11);
    CHECK(counts.at(1) >= 9);
}

TEST_CASE("a new worker's first measured call replaces the guess its place was reckoned with", "[swarm][router]") {
    // The pool takes 1 ms a call; the guess for a worker not measured yet is 1 s. Without the
    // correction, the newcomer would wait some 1000 of the pool's calls after its first.
    router r(0, {.initial_seconds = 1.0});
    r.join(1);
    r.finished(1, 0.001);
    (void)count_picks(r, 50);
    r.join(2);
    // It enters at the minimum, level with worker 1: one of the next two calls is its.
    const bool picked = r.pick_or_throw() == 2 || r.pick_or_throw() == 2;
    CHECK(picked);
    r.finished(2, 0.001);
    const auto counts = count_picks(r, 40);
    CHECK(counts.at(2) >= 19);
    CHECK(counts.at(2) <= 21);
}

TEST_CASE("one slow first call does not keep a worker idle for the rest of a run", "[swarm][router]") {
    // Both workers take 1 ms a call, but worker 2's first call takes 100 ms (a cold start on a
    // loaded host). Trusted alone, that call would hold worker 2 back for some 100 of worker 1's
    // calls, and no later call could correct it: it would get none.
    router r(0);
    r.join(1);
    r.join(2);
    bool first_of_2 = true;
    std::map<worker_id, int> counts;
    for (int i = 0; i < 100; ++i) {
        const auto id = r.pick_or_throw();
        ++counts[id];
        const bool cold = id == 2 && std::exchange(first_of_2, false);
        r.finished(id, cold ? 0.1 : 0.001);
    }
    // A probe gives worker 2 a call within 8 x 2 picks, the trial keeps the faster of its
    // first two calls, and from then on the two share the calls.
    CHECK(counts.at(2) >= 35);
    CHECK(r.expected_seconds(2) == Approx(0.001));
    CHECK(*r.class_seconds(2, call_class::forward) == Approx(0.001));
}

TEST_CASE("a worker passed over is probed, one probe at a time", "[swarm][router]") {
    router r(0, {.probe_after = 4});
    r.join(1);
    r.join(2);
    r.finished(1, 0.001);
    r.finished(1, 0.001);  // worker 1's trial is over
    r.finished(2, 1.0);    // worker 2, a thousand times slower, has one call of its two
    std::vector<worker_id> picks;
    for (int i = 0; i < 30; ++i) picks.push_back(r.pick_or_throw());
    r.finished(2, 1.0);  // the probe is answered, slow again
    for (int i = 0; i < 60; ++i) picks.push_back(r.pick_or_throw());
    // Passed over for 4 x 2 picks, it gets the 9th. No second probe while that call is out
    // (the 18th and 27th would be); answered, it gets the 31st, and no other while that one is
    // out. By its speed alone it would get 1 call in 1001.
    for (std::size_t i = 0; i < picks.size(); ++i) {
        INFO("pick " << i + 1);
        CHECK(picks[i] == (i + 1 == 9 || i + 1 == 31 ? 2U : 1U));
    }
    CHECK(r.expected_seconds(2) == Approx(1.0));  // a probe changes no estimate by itself
}

TEST_CASE("a timeout ends the trial, and a join starts a new one", "[swarm][router]") {
    router r(0, {.ema_weight = 0.2, .timeout_penalty = 2, .probe_after = 4});
    r.join(1);
    r.join(2);
    r.finished(1, 0.001);
    r.finished(1, 0.001);
    r.finished(2, 1.0);
    r.timed_out(2);  // its calls may hang: it is not probed until one is answered
    CHECK(count_picks(r, 90).count(2) == 0);
    CHECK(r.expected_seconds(2) == Approx(2.0));
    r.finished(2, 0.001);  // after the trial, a fast call is blended into the penalty
    CHECK(r.expected_seconds(2) == Approx(0.8 * 2.0 + 0.2 * 0.001));
    // Back after a ban (a restarted process, say), its first call replaces the estimate again.
    r.failed(2);
    r.join(2);
    // It enters at the minimum, level with worker 1: one of the next two calls is its.
    const bool picked = r.pick_or_throw(call_class::backward) == 2 || r.pick_or_throw(call_class::backward) == 2;
    REQUIRE(picked);
    r.finished(2, 0.001, call_class::backward);
    CHECK(r.expected_seconds(2) == Approx(0.001));
    CHECK(*r.class_seconds(2, call_class::backward) == Approx(0.001));
    const auto counts = count_picks(r, 40);
    CHECK(counts.at(2) >= 18);  // and it takes its share at once
}

TEST_CASE("a failed worker is banned until it announces itself again", "[swarm][router]") {
    router r(2);
    r.join(1);
    r.join(2);
    r.failed(1);
    CHECK_FALSE(r.is_live(1));
    CHECK(r.times_banned(1) == 1);
    CHECK(count_picks(r, 10).count(1) == 0);
    r.join(1);
    CHECK(count_picks(r, 10).at(1) >= 4);
    r.failed(1);
    r.failed(2);
    CHECK_FALSE(r.pick().has_value());
    CHECK_THROWS_WITH(r.pick_or_throw(), Catch::Contains("swarm stage 2 has no live worker"));
    r.leave(2);
    CHECK(r.live_workers() == 0);
}

TEST_CASE("timeouts follow each worker's EMA, and a timeout costs its share", "[swarm][router]") {
    // One trial call: from the second call on, the EMA.
    router r(0, router_options{.ema_weight = 0.5, .timeout_multiple = 3, .timeout_floor_seconds = 0.5,
                               .timeout_penalty = 4, .trial_calls = 1});
    r.join(1);
    r.join(2);
    r.finished(1, 0.1);
    CHECK(r.timeout_seconds(1) == Approx(0.5));  // 3 x 0.1 is under the floor
    r.finished(1, 0.5);                          // EMA (0.1 + 0.5) / 2 = 0.3
    CHECK(r.expected_seconds(1) == Approx(0.3));
    CHECK(r.timeout_seconds(1) == Approx(0.9));
    r.finished(2, 0.3);
    r.timed_out(2);  // 0.3 x 4
    CHECK(r.expected_seconds(2) == Approx(1.2));
    CHECK(r.timeout_seconds(2) == Approx(3.6));
    const auto counts = count_picks(r, 100);
    CHECK(counts.at(1) >= 78);  // 1.2 / 0.3 = 4 times as many calls
    CHECK(counts.at(1) <= 82);
}

TEST_CASE("ties go in random order, the same for the same seed", "[swarm][router]") {
    std::set<weft::swarm::worker_id> first_picks;
    for (std::uint64_t seed = 0; seed < 16; ++seed) {
        router a(0, {}, seed), b(0, {}, seed);
        for (weft::swarm::worker_id id = 1; id <= 4; ++id) {
            a.join(id);
            b.join(id);
        }
        const auto pick = a.pick_or_throw();
        CHECK(pick == b.pick_or_throw());
        first_picks.insert(pick);
    }
    CHECK(first_picks.size() >= 3);
}

TEST_CASE("bad router options and unknown workers are refused by name", "[swarm][router]") {
    CHECK_THROWS_WITH(router(0, router_options{.ema_weight = 0}), Catch::Contains("ema_weight"));
    CHECK_THROWS_WITH(router(0, router_options{.timeout_multiple = 0.5}), Catch::Contains("timeout_multiple"));
    CHECK_THROWS_WITH(router(0, router_options{.timeout_floor_seconds = 0}), Catch::Contains("timeout_floor_seconds"));
    CHECK_THROWS_WITH(router(0, router_options{.timeout_penalty = 0.5}), Catch::Contains("timeout_penalty"));
    CHECK_THROWS_WITH(router(0, router_options{.trial_calls = 0}), Catch::Contains("trial_calls"));
    CHECK_THROWS_WITH(router(0, router_options{.probe_after = 0}), Catch::Contains("probe_after"));
    router r(0);
    CHECK_THROWS_WITH(r.finished(9, 1.0), Catch::Contains("swarm worker") && Catch::Contains("never joined"));
    r.join(9);
    CHECK_THROWS_WITH(r.finished(9, -1.0), Catch::Contains("call seconds"));
}
