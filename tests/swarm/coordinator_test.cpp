// The SWARM policy as a state machine (swarm/coordinator.hpp), driven by hand: whole steps
// with every call answered, and then crashes, late replies, duplicate answers, joins,
// moves, refusals, lost applies and replayed steps. After every step each stage has each
// micro-batch's contribution collected exactly once: no sample lost, none counted twice.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/coordinator.hpp"

using weft::swarm::call;
using weft::swarm::call_kind;
using weft::swarm::coordinator;
using weft::swarm::coordinator_options;
using weft::swarm::step_phase;
using weft::swarm::worker_id;

namespace {

// What the test's driver does with a call it was given: answer it (after `seconds`), let it
// time out, or keep it unanswered for now.
enum class fate { answer, time_out, hold };

struct driver {
    explicit driver(coordinator& coordinated) : c(coordinated) {}
    coordinator& c;
    std::vector<call> sent;  // every call handed out, in order
    std::vector<call> held;  // calls neither answered nor timed out yet
    std::function<fate(const call&)> decide = [](const call&) { return fate::answer; };
    std::function<double(const call&)> seconds = [](const call&) { return 0.1; };

    // Hands out and settles calls until the step reaches `until` (or nothing is left to do).
    void run_until(step_phase until) {
        for (int round = 0; round < 10000 && c.phase() != until; ++round) {
            auto calls = c.take_calls();
            if (calls.empty()) return;
            for (auto& x : calls) {
                sent.push_back(x);
                switch (decide(x)) {
                    case fate::answer:
                        c.answered(x.id, seconds(x));
                        break;
                    case fate::time_out:
                        c.timed_out(x.id);
                        break;
                    case fate::hold:
                        held.push_back(x);
                        break;
                }
                if (c.phase() == until) return;
            }
        }
    }
    // A whole step: computing, collecting, applying.
    void step() {
        c.begin_step();
        run_until(step_phase::summed);
        REQUIRE(c.phase() == step_phase::summed);
        check_each_sample_once();
        c.begin_apply();
        run_until(step_phase::applied);
        REQUIRE(c.phase() == step_phase::applied);
        c.end_step();
    }
    void check_each_sample_once() const {
        const auto& o = c.options();
        for (int k = 0; k < o.stages; ++k) {
            const auto& got = c.collected()[std::size_t(k)];
            CHECK(got.size() == std::size_t(o.microbatches));
            for (int mb = 0; mb < o.microbatches; ++mb) CHECK(got.contains(mb));
        }
    }
    // The calls of `kind` sent to `worker`, from the index `from` of `sent` on.
    [[nodiscard]] int count(call_kind kind, worker_id worker, std::size_t from = 0) const {
        int n = 0;
        for (std::size_t i = from; i < sent.size(); ++i) n += sent[i].kind == kind && sent[i].worker == worker;
        return n;
    }
};

coordinator_options two_stages(int microbatches = 4) {
    return {.stages = 2, .microbatches = microbatches, .max_in_flight = 0, .max_attempts = 8, .catch_up_steps = 2};
}

// Workers 0, 1 on stage 0 and 2, 3 on stage 1, all ready at step 0.
void admit_four(coordinator& c) {
    for (worker_id id = 0; id < 4; ++id) {
        REQUIRE(c.admit(id, int(id / 2)) == int(id / 2));
        REQUIRE(c.ready(id, 0));
    }
}

}  // namespace

TEST_CASE("a calm step: every micro-batch forward and back, collected once, applied everywhere",
          "[swarm][coordinator]") {
    coordinator c(two_stages());
    admit_four(c);
    driver d(c);
    d.step();
    // Stage 0: a forward and a backward per micro-batch; stage 1 (the last): one call each.
    int forwards = 0, backwards = 0, collects = 0, applies = 0;
    for (const auto& x : d.sent) {
        forwards += x.kind == call_kind::forward;
        backwards += x.kind == call_kind::backward;
        collects += x.kind == call_kind::collect;
        applies += x.kind == call_kind::apply;
        if (x.kind == call_kind::forward) CHECK(x.stage == 0);
        CHECK(x.due_after_seconds >= x.timeout_seconds);
    }
    CHECK(forwards == 4);
    CHECK(backwards == 8);
    CHECK(collects <= 4);  // one per (stage, worker whose backwards counted)
    CHECK(applies == 4);
    CHECK(c.step() == 1);
    CHECK(c.counts().retried_calls == 0);
    for (const auto& [id, m] : c.members()) CHECK(m.step == 1);
    // Collect calls name disjoint micro-batches that, per stage, cover the step.
    std::map<int, std::multiset<int>> per_stage;
    for (const auto& x : d.sent)
        if (x.kind == call_kind::collect)
            for (const int mb : x.microbatches) per_stage[x.stage].insert(mb);
    for (const auto& [k, mbs] : per_stage) CHECK(mbs == std::multiset<int>{0, 1, 2, 3});
}

TEST_CASE("at most --in-flight micro-batches go at once", "[swarm][coordinator]") {
    auto o = two_stages(6);
    o.max_in_flight = 2;
    coordinator c(o);
    admit_four(c);
    c.begin_step();
    const auto first = c.take_calls();
    CHECK(first.size() == 2);
    for (const auto& x : first) CHECK(x.kind == call_kind::forward);
    driver d(c);
    for (const auto& x : first) c.answered(x.id, 0.1);
    d.run_until(step_phase::summed);
    CHECK(c.phase() == step_phase::summed);
    d.check_each_sample_once();
}

TEST_CASE("a timed-out call goes elsewhere, and its late answer is ignored", "[swarm][coordinator]") {
    coordinator c(two_stages());
    admit_four(c);
    driver d(c);
    bool first = true;
    call late{};
    d.decide = [&](const call& x) {
        if (first && x.kind == call_kind::forward) {
            first = false;
            late = x;
            return fate::time_out;
        }
        return fate::answer;
    };
    c.begin_step();
    d.run_until(step_phase::summed);
    CHECK(c.counts().retried_calls == 1);
    CHECK(c.member(late.worker)->timeouts == 1);
    // The worker answers after all: too late, nothing changes.
    const auto accepted = c.accepted();
    CHECK_FALSE(c.answered(late.id, 0.1));
    CHECK(c.counts().late_replies == 1);
    CHECK(c.accepted() == accepted);
    d.check_each_sample_once();
    c.begin_apply();
    d.run_until(step_phase::applied);
    c.end_step();
}

TEST_CASE("a duplicate answer counts once", "[swarm][coordinator]") {
    coordinator c(two_stages(1));
    admit_four(c);
    c.begin_step();
    const auto calls = c.take_calls();
    REQUIRE(calls.size() == 1);
    REQUIRE(c.answered(calls[0].id, 0.1));
    CHECK_FALSE(c.answered(calls[0].id, 0.1));  // the same answer again
    CHECK(c.counts().late_replies == 1);
    const auto next = c.take_calls();
    REQUIRE(next.size() == 1);  // one call for the one micro-batch: the last stage's, not two
    CHECK(next[0].stage == 1);
}

TEST_CASE("a worker that crashes after its backward counted has that backward redone", "[swarm][coordinator]") {
    coordinator c(two_stages());
    admit_four(c);
    driver d(c);
    c.begin_step();
    d.run_until(step_phase::collecting);
    REQUIRE(c.phase() == step_phase::collecting);
    // A stage-1 worker whose backwards counted dies before handing them over.
    worker_id victim = 99;
    int its_backwards = 0;
    for (const auto& [key, holder] : c.accepted())
        if (key.first == 1) victim = holder;
    for (const auto& [key, holder] : c.accepted()) its_backwards += key.first == 1 && holder == victim;
    REQUIRE(c.failed(victim));
    CHECK_FALSE(c.failed(victim));  // once
    const std::size_t before = d.sent.size();
    d.run_until(step_phase::summed);
    REQUIRE(c.phase() == step_phase::summed);
    d.check_each_sample_once();
    CHECK(c.counts().redone_backwards == its_backwards);
    CHECK(d.count(call_kind::collect, victim, before) == 0);
    for (const auto& [key, holder] : c.accepted()) CHECK(holder != victim);
    c.begin_apply();
    d.run_until(step_phase::applied);
    c.end_step();  // stage 1 still has a worker that stepped
    CHECK(c.step() == 1);
}

TEST_CASE("a worker that dies with calls owed: those calls fail over at once", "[swarm][coordinator]") {
    coordinator c(two_stages());
    admit_four(c);
    driver d(c);
    d.decide = [](const call&) { return fate::hold; };
    c.begin_step();
    d.run_until(step_phase::summed);  // every forward held
    REQUIRE(d.held.size() == 4);
    const worker_id victim = d.held[0].worker;
    int owed = 0;
    for (const auto& x : d.held) owed += x.worker == victim;
    c.failed(victim);
    CHECK(c.counts().retried_calls == owed);
    d.decide = [](const call&) { return fate::answer; };
    for (const auto& x : d.held)
        if (x.worker != victim) c.answered(x.id, 0.1);
    d.run_until(step_phase::summed);
    REQUIRE(c.phase() == step_phase::summed);
    d.check_each_sample_once();
    for (std::size_t i = 4; i < d.sent.size(); ++i) CHECK(d.sent[i].worker != victim);
}

TEST_CASE("a failed collect has its micro-batches redone; the collect's late answer is ignored",
          "[swarm][coordinator]") {
    coordinator c(two_stages());
    admit_four(c);
    driver d(c);
    bool once = true;
    call lost{};
    d.decide = [&](const call& x) {
        if (once && x.kind == call_kind::collect) {
            once = false;
            lost = x;
            return fate::time_out;
        }
        return fate::answer;
    };
    c.begin_step();
    d.run_until(step_phase::summed);
    REQUIRE(c.phase() == step_phase::summed);
    CHECK(c.counts().redone_backwards == static_cast<long long>(lost.microbatches.size()));
    CHECK_FALSE(c.answered(lost.id, 0));
    d.check_each_sample_once();
}

TEST_CASE("the retry cap fails the step with a message naming the option", "[swarm][coordinator]") {
    auto o = two_stages(1);
    o.max_attempts = 3;
    coordinator c(o);
    admit_four(c);
    driver d(c);
    d.decide = [](const call&) { return fate::time_out; };
    c.begin_step();
    CHECK_THROWS_WITH(d.run_until(step_phase::summed),
                      Catch::Contains("--max-attempts 3") && Catch::Contains("forward of micro-batch 0 at stage 0"));
}

TEST_CASE("a stage with no live worker starves, and a joiner wakes it", "[swarm][coordinator]") {
    coordinator c(two_stages());
    admit_four(c);
    c.failed(2);
    c.failed(3);
    driver d(c);
    c.begin_step();
    d.run_until(step_phase::summed);
    CHECK(c.phase() == step_phase::computing);
    CHECK(c.starved_stages() == std::vector<int>{1});
    // At step 0 a joiner may take stage 1 (its state is the initial weights).
    CHECK(c.admit(7, 1) == 1);
    CHECK(c.anyone_joining());
    c.ready(7, 0);
    CHECK_FALSE(c.anyone_joining());
    d.run_until(step_phase::summed);
    REQUIRE(c.phase() == step_phase::summed);
    CHECK(c.starved_stages().empty());
    CHECK(d.count(call_kind::backward, 7) == 4);
}

TEST_CASE("a joiner without a wish goes to the most loaded stage; past step 0 never to an empty one",
          "[swarm][coordinator]") {
    coordinator c(two_stages());
    admit_four(c);
    driver d(c);
    // Stage 1's workers are three times slower than stage 0's.
    d.seconds = [](const call& x) { return x.stage == 1 ? 0.3 : 0.1; };
    d.step();
    CHECK(c.admit(10, -1) == 1);
    c.ready(10, 1);
    CHECK(c.ready_count(1) == 3);
    // Every worker of stage 0 dies: a joiner past step 0 cannot fetch its state there.
    c.failed(0);
    c.failed(1);
    CHECK(c.admit(11, 0) == 1);
}

TEST_CASE("a worker ready at an older step replays the kept steps, then serves", "[swarm][coordinator]") {
    coordinator c(two_stages(2));
    admit_four(c);
    driver d(c);
    d.step();
    d.step();  // steps 0 and 1 are kept (catch_up_steps 2)
    CHECK(c.kept_steps() == std::deque<std::uint64_t>{0, 1});
    const std::size_t before = d.sent.size();
    CHECK(c.admit(5, 0) == 0);
    c.ready(5, 1);  // it fetched step 1's state: it lacks step 1's apply
    const auto replays = c.take_calls();
    REQUIRE(replays.size() == 1);
    CHECK(replays[0].kind == call_kind::catch_up);
    CHECK(replays[0].step == 1);
    CHECK(c.member(5)->catching_up == 1);
    CHECK_FALSE(c.member(5)->ready);
    c.answered(replays[0].id, 0);
    CHECK(c.member(5)->ready);
    CHECK(c.member(5)->step == 2);
    d.step();
    CHECK(d.count(call_kind::apply, 5, before) == 1);
    // Too far behind: it fetches its state again.
    CHECK(c.admit(6, 0) == 0);
    c.ready(6, 0);
    CHECK(c.take_rejoins() == std::vector<worker_id>{6});
}

TEST_CASE("a worker that becomes ready while the applies go out replays that step", "[swarm][coordinator]") {
    coordinator c(two_stages(2));
    admit_four(c);
    driver d(c);
    c.begin_step();
    d.run_until(step_phase::summed);
    c.begin_apply();
    c.admit(8, 0);
    c.ready(8, 0);  // holds step 0's state, but the applies went out without it
    d.run_until(step_phase::applied);
    c.end_step();
    CHECK_FALSE(c.member(8)->ready);
    const auto replays = c.take_calls();
    REQUIRE(replays.size() == 1);
    CHECK(replays[0].kind == call_kind::catch_up);
    CHECK(replays[0].worker == 8);
    c.answered(replays[0].id, 0);
    CHECK(c.member(8)->ready);
}

TEST_CASE("a lost apply sends its worker for its state; a stage that loses every apply ends the run",
          "[swarm][coordinator]") {
    coordinator c(two_stages(2));
    admit_four(c);
    driver d(c);
    c.begin_step();
    d.run_until(step_phase::summed);
    d.decide = [](const call& x) { return x.worker == 0 ? fate::time_out : fate::answer; };
    c.begin_apply();
    d.run_until(step_phase::applied);
    c.end_step();
    CHECK(c.take_rejoins() == std::vector<worker_id>{0});
    CHECK_FALSE(c.member(0)->ready);

    d.decide = [](const call& x) { return x.kind == call_kind::apply && x.stage == 1 ? fate::time_out : fate::answer; };
    c.begin_step();
    d.run_until(step_phase::summed);
    c.begin_apply();
    d.run_until(step_phase::applied);
    CHECK_THROWS_WITH(c.end_step(), Catch::Contains("stage 1 lost every worker while stepping at step 1"));
}

TEST_CASE("a refusal from a worker at another step sends it for its state", "[swarm][coordinator]") {
    coordinator c(two_stages(1));
    admit_four(c);
    c.begin_step();
    const auto calls = c.take_calls();
    REQUIRE(calls.size() == 1);
    c.refused(calls[0].id, 5, "holds step 5");
    CHECK(c.counts().retried_calls == 1);
    CHECK(c.take_rejoins() == std::vector<worker_id>{calls[0].worker});
    const auto again = c.take_calls();
    REQUIRE(again.size() == 1);
    CHECK(again[0].worker != calls[0].worker);
    CHECK(again[0].microbatch == 0);
}

TEST_CASE("rebalancing moves a worker to the slow stage, which it serves once ready", "[swarm][coordinator]") {
    coordinator_options o = two_stages(4);
    coordinator c(o);
    for (worker_id id = 0; id < 4; ++id) c.admit(id, id < 3 ? 0 : 1);  // three on stage 0, one on stage 1
    for (worker_id id = 0; id < 4; ++id) c.ready(id, 0);
    driver d(c);
    d.seconds = [](const call& x) { return x.stage == 1 ? 0.3 : 0.1; };  // stage 1's one worker is the bottleneck
    d.step();
    REQUIRE_FALSE(c.anyone_joining());
    const auto move = c.rebalance();
    REQUIRE(move);
    CHECK(move->from == 0);
    CHECK(move->to == 1);
    CHECK(c.member(move->worker)->stage == 1);
    CHECK(c.anyone_joining());
    CHECK(c.take_rejoins() == std::vector<worker_id>{move->worker});
    c.ready(move->worker, 1);
    const std::size_t before = d.sent.size();
    d.step();
    CHECK(d.count(call_kind::backward, move->worker, before) > 0);
    for (std::size_t i = before; i < d.sent.size(); ++i)
        if (d.sent[i].worker == move->worker && d.sent[i].kind != call_kind::apply) CHECK(d.sent[i].stage == 1);
}

TEST_CASE("a worker that starts over loses its calls, and keeps its id", "[swarm][coordinator]") {
    coordinator c(two_stages(2));
    admit_four(c);
    driver d(c);
    d.decide = [](const call&) { return fate::hold; };
    c.begin_step();
    d.run_until(step_phase::summed);
    REQUIRE(d.held.size() == 2);
    const worker_id restarted = d.held[0].worker;
    CHECK(c.admit(restarted, 0) == 0);
    CHECK_FALSE(c.awaited(d.held[0].id));
    CHECK(c.counts().retried_calls >= 1);
    c.ready(restarted, 0);
    d.decide = [](const call&) { return fate::answer; };
    for (const auto& x : d.held)
        if (c.awaited(x.id)) c.answered(x.id, 0.1);
    d.run_until(step_phase::summed);
    d.check_each_sample_once();
}

TEST_CASE("round-robin routing takes every ready worker in turn", "[swarm][coordinator]") {
    auto o = two_stages(8);
    o.routing = weft::swarm::routing_rule::round_robin;
    coordinator c(o);
    admit_four(c);
    driver d(c);
    c.begin_step();
    d.run_until(step_phase::summed);
    CHECK(d.count(call_kind::forward, 0) == 4);
    CHECK(d.count(call_kind::forward, 1) == 4);
}

TEST_CASE("bad options name themselves", "[swarm][coordinator]") {
    auto o = two_stages();
    o.max_attempts = 0;
    CHECK_THROWS_WITH(coordinator(o), Catch::Contains("--max-attempts"));
    o = two_stages();
    o.microbatches = 0;
    CHECK_THROWS_WITH(coordinator(o), Catch::Contains("--microbatches"));
}

TEST_CASE("a run restarted from a checkpoint sends every member for its state and fills empty stages",
          "[swarm][coordinator]") {
    coordinator c(two_stages(2));
    admit_four(c);
    driver d(c);
    d.step();
    d.step();
    // Stage 1 loses every worker; past step 0 a joiner cannot go there (no state to fetch).
    c.failed(2);
    c.failed(3);
    CHECK(c.admit(9, 1) == 0);
    c.ready(9, 2);
    CHECK_FALSE(c.restorable());
    // The run goes back to its checkpoint of step 1: everyone fetches it again, and stage 1
    // takes joiners, who fetch it from the checkpoint.
    c.restart_at(1);
    CHECK(c.step() == 1);
    CHECK(c.restorable());
    CHECK(c.kept_steps().empty());
    auto rejoins = c.take_rejoins();
    std::sort(rejoins.begin(), rejoins.end());
    CHECK(rejoins == std::vector<worker_id>{0, 1, 9});
    CHECK(c.ready_count(0) == 0);
    CHECK(c.admit(12, -1) == 1);  // the most loaded: empty
    CHECK(c.admit(13, 1) == 1);   // a wish for an empty stage holds
    for (const worker_id id : {0, 1, 9, 12, 13}) c.ready(id, 1);
    CHECK(c.ready_count(1) == 2);
    d.step();
    CHECK(c.step() == 2);
    CHECK_FALSE(c.restorable());
    // Mid-step: the step is abandoned (its calls are no longer awaited), and the next begins.
    c.begin_step();
    const auto calls = c.take_calls();
    REQUIRE_FALSE(calls.empty());
    c.restart_at(0);
    CHECK(c.phase() == step_phase::between_steps);
    CHECK_FALSE(c.awaited(calls.front().id));
    CHECK(c.take_calls().empty());
    for (const worker_id id : {0, 1, 9, 12, 13}) c.ready(id, 0);
    d.step();
    CHECK(c.step() == 1);
}

TEST_CASE("an unreachable worker's calls fail over, and it serves again once heard from, unbanned",
          "[swarm][coordinator]") {
    coordinator c(two_stages(4));
    admit_four(c);
    driver d(c);
    d.decide = [](const call&) { return fate::hold; };
    c.begin_step();
    d.run_until(step_phase::summed);
    const worker_id flaky = d.held.front().worker;
    int owed = 0;
    for (const auto& x : d.held) owed += x.worker == flaky;
    c.unreachable(flaky);
    CHECK(c.counts().retried_calls == owed);
    CHECK(c.member(flaky)->live);
    CHECK(c.member(flaky)->ready);
    CHECK(c.route(0).times_banned(flaky) == 0);
    // Its calls went elsewhere; none goes to it while it is unreachable.
    const std::size_t before = d.sent.size();
    d.decide = [](const call&) { return fate::answer; };
    for (const auto& x : d.held)
        if (c.awaited(x.id)) c.answered(x.id, 0.1);
    d.run_until(step_phase::collecting);
    for (std::size_t i = before; i < d.sent.size(); ++i) CHECK(d.sent[i].worker != flaky);
    // Heard from again: it takes calls (its collect first: it held backwards from before).
    c.reachable(flaky);
    d.run_until(step_phase::summed);
    REQUIRE(c.phase() == step_phase::summed);
    d.check_each_sample_once();
    c.begin_apply();
    d.run_until(step_phase::applied);
    c.end_step();
    d.step();
    CHECK(d.count(call_kind::forward, flaky, before) + d.count(call_kind::backward, flaky, before) > 0);
}

TEST_CASE("a worker unreachable while it replays steps fetches its state again", "[swarm][coordinator]") {
    coordinator c(two_stages(2));
    admit_four(c);
    driver d(c);
    d.step();
    d.step();
    c.admit(5, 0);
    c.ready(5, 1);  // one step behind: a replay
    const auto replays = c.take_calls();
    REQUIRE(replays.size() == 1);
    REQUIRE(replays[0].kind == call_kind::catch_up);
    c.unreachable(5);
    CHECK_FALSE(c.awaited(replays[0].id));
    CHECK(c.member(5)->catching_up == 0);
    CHECK(c.take_rejoins() == std::vector<worker_id>{5});
    c.reachable(5);
    c.ready(5, 2);
    CHECK(c.member(5)->ready);
}
