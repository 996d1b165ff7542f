// SWARM on the virtual clock (swarm/sim/): the same answer every time, the optimum as an
// upper bound, IWRR against round-robin, rebalancing out of a bad placement, exactness
// through failures, the checkpoint-restart baseline, the traces, and bad input.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/sim/checkpoint_restart.hpp"
#include "weft/swarm/sim/placement_ceiling.hpp"
#include "weft/swarm/sim/virtual_swarm.hpp"
#include "weft/swarm/sim/worker_traces.hpp"

namespace sim = weft::swarm::sim;

namespace {

sim::swarm_model small_model(double duration) {
    sim::swarm_model m;
    m.forward_seconds = {0.1, 0.1, 0.1, 0.4 / 3};  // 0.4 s of work a micro-batch at every stage
    m.microbatches_per_step = 256;
    m.in_flight = 64;
    m.duration_seconds = duration;
    return m;
}

std::vector<sim::sim_worker> always_up(const std::vector<double>& speeds, const std::vector<int>& stages) {
    std::vector<sim::sim_worker> workers;
    for (std::size_t i = 0; i < speeds.size(); ++i)
        workers.push_back({.speed = speeds[i], .stage = stages[i], .up = {{0.0, INFINITY}}});
    return workers;
}

}  // namespace

TEST_CASE("a simulated run gives the same answer every time", "[swarm][sim]") {
    const auto trace = sim::failures_at_rate(std::vector<double>(16, 1.0), 4, 2.0, 30, 1800, 3);
    const auto a = sim::simulate(small_model(1800), trace.workers);
    const auto b = sim::simulate(small_model(1800), trace.workers);
    CHECK(a.microbatches == b.microbatches);
    CHECK(a.calls == b.calls);
    CHECK(a.retried_calls == b.retried_calls);
    CHECK(a.redone_backwards == b.redone_backwards);
    CHECK(a.optimal_microbatches == b.optimal_microbatches);
}

TEST_CASE("balanced workers without failures come close to the optimum, never past it", "[swarm][sim]") {
    std::vector<int> stages;
    for (int i = 0; i < 16; ++i) stages.push_back(i % 4);
    const auto r = sim::simulate(small_model(3600), always_up(std::vector<double>(16, 1.0), stages));
    // 16 workers, 1.6 s of work a micro-batch: the optimum is 10 micro-batches a second.
    CHECK(r.optimal_microbatches == Approx(10.0 * 3600));
    CHECK(r.placement_fraction_of_optimal() == Approx(1.0));
    CHECK(r.fraction_of_optimal() > 0.8);  // what the step barriers leave
    CHECK(r.fraction_of_optimal() < 1.0);
    // Every step's micro-batches counted once, and nothing redone without failures.
    CHECK(r.microbatches == double(r.steps) * 256);
    CHECK(r.redone_backwards == 0);
    CHECK(r.retried_calls == 0);
}

TEST_CASE("IWRR routes by speed where round-robin waits for the slowest", "[swarm][sim]") {
    std::vector<double> speeds;
    std::vector<int> stages;
    for (int k = 0; k < 4; ++k)
        for (const double s : {2.0, 2.0, 1.0, 1.0, 0.5, 0.25}) {
            speeds.push_back(s);
            stages.push_back(k);
        }
    auto model = small_model(1800);
    const auto weighted = sim::simulate(model, always_up(speeds, stages));
    model.routing = weft::swarm::routing_rule::round_robin;
    const auto uniform = sim::simulate(model, always_up(speeds, stages));
    // Round-robin gives each worker a sixth of the calls, so the 0.25 one sets the pace: a
    // stage makes at most 6 x 0.25 / 0.4 s = 3.75 micro-batches a second of the 16.9 its
    // 6.75 of speed could.
    CHECK(uniform.microbatches_per_second() <= 3.75);
    CHECK(weighted.microbatches_per_second() > 3 * uniform.microbatches_per_second());
    CHECK(weighted.fraction_of_optimal() > 0.7);
}

TEST_CASE("rebalancing moves workers out of a bad placement", "[swarm][sim]") {
    // Ten workers start in stage 0, two in each other stage: the others hold the pace to half.
    std::vector<int> stages(10, 0);
    for (int k = 1; k < 4; ++k) stages.insert(stages.end(), {k, k});
    const auto workers = always_up(std::vector<double>(16, 1.0), stages);
    auto model = small_model(7200);
    const auto never = sim::simulate(model, workers);
    model.rebalance_seconds = 60;
    const auto every_minute = sim::simulate(model, workers);
    CHECK(never.moves == 0);
    CHECK(never.placement_fraction_of_optimal() == Approx(0.5));
    CHECK(every_minute.moves >= 6);  // two into each short stage
    CHECK(every_minute.placement_fraction_of_optimal() > 0.9);
    CHECK(every_minute.microbatches > 1.6 * never.microbatches);
}

TEST_CASE("failures cost throughput, redone backwards, never a counted sample", "[swarm][sim]") {
    const std::vector<double> speeds(16, 1.0);
    const auto calm = sim::failures_at_rate(speeds, 4, 0.0, 60, 3600, 5);
    const auto stormy = sim::failures_at_rate(speeds, 4, 4.0, 60, 3600, 5);
    CHECK(calm.failures.empty());
    CHECK(stormy.failures.size() > 30);  // 4 an hour for each of 16 workers: about 64
    const auto a = sim::simulate(small_model(3600), calm.workers);
    const auto b = sim::simulate(small_model(3600), stormy.workers);
    CHECK(b.redone_backwards > 0);
    CHECK(b.retried_calls > 0);
    CHECK(b.departures == static_cast<long long>(stormy.failures.size()));
    CHECK(b.microbatches < a.microbatches);
    CHECK(b.microbatches == double(b.steps) * 256);
    CHECK(b.fraction_of_optimal() > 0.5);
}

TEST_CASE("the static pipeline restarts from its checkpoint on every failure", "[swarm][sim]") {
    sim::static_pipeline_model model{.forward_seconds = {0.1, 0.1},
                                     .backward_multiple = 2,
                                     .latency_seconds = 0,
                                     .replicas = 2,
                                     .microbatches_per_step = 64,
                                     .apply_seconds = 0,
                                     .checkpoint_seconds = 10,
                                     .restart_seconds = 60,
                                     .checkpoint_interval = 0,
                                     .duration_seconds = 3600};
    // 1F1B over 32 micro-batches a replica and 2 stages of 0.3 s: 31 x 0.3 + 0.6.
    CHECK(model.step_seconds() == Approx(9.9));
    const auto calm = sim::simulate_static(model, {}, 0);
    CHECK(calm.restarts == 0);
    CHECK(calm.microbatches == Approx(64.0 * std::floor(3600 / 9.9)));
    // A failure every 10 minutes: Young's interval is sqrt(2 x 10 x 600), and each failure
    // costs the restart and the work since the last checkpoint.
    std::vector<double> failures;
    for (double t = 600; t < 3600; t += 600) failures.push_back(t);
    const auto stormy = sim::simulate_static(model, failures, 600);
    CHECK(stormy.restarts == 5);
    CHECK(stormy.checkpoint_interval == Approx(std::sqrt(2.0 * 10 * 600)));
    CHECK(stormy.microbatches < calm.microbatches - 5 * 60 / 9.9 * 64);
}

TEST_CASE("worker traces are reproducible and well formed", "[swarm][sim]") {
    const std::vector<double> speeds{1, 2, 0.5, 1};
    const auto a = sim::preemptible(speeds, 600, 300, 7200, 9);
    const auto b = sim::preemptible(speeds, 600, 300, 7200, 9);
    const auto c = sim::preemptible(speeds, 600, 300, 7200, 10);
    REQUIRE(a.size() == 4);
    bool differs = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].up == b[i].up);
        differs = differs || a[i].up != c[i].up;
        CHECK(a[i].speed == speeds[i]);
        for (std::size_t j = 0; j < a[i].up.size(); ++j) {
            CHECK(a[i].up[j].first < a[i].up[j].second);
            if (j > 0) CHECK(a[i].up[j - 1].second < a[i].up[j].first);
        }
    }
    CHECK(differs);
}

TEST_CASE("the whole-worker ceiling is what dividing whole workers afresh at every instant allows", "[swarm][sim]") {
    auto model = small_model(100);  // four stages of equal work
    // As many equal workers as stages: each stage gets one, the fluid bound itself.
    CHECK(sim::whole_worker_placement_fraction(model, always_up({1, 1, 1, 1}, {-1, -1, -1, -1})) == Approx(1.0));
    // Five: one stage gets two, the slowest has one of the 5 / 4 the fluid bound gives it.
    CHECK(sim::whole_worker_placement_fraction(model, always_up({1, 1, 1, 1, 1}, {-1, -1, -1, -1, -1})) == Approx(0.8));
    // Mixed speeds that divide evenly: 2 | 1 + 1 | 1 + 0.5 + 0.5 | 2.
    CHECK(sim::whole_worker_placement_fraction(model, always_up({2, 2, 1, 1, 1, 0.5, 0.5}, std::vector<int>(7, -1))) ==
          Approx(1.0));
    // Over time: four workers for the first 50 s, then one of them gone (three stages manned,
    // the fourth empty: nothing flows) for the last 50. Fluid: 4 / 1.6 then 3 / 1.6 a second.
    std::vector<sim::sim_worker> workers = always_up({1, 1, 1, 1}, {-1, -1, -1, -1});
    workers[3].up = {{0.0, 50.0}};
    CHECK(sim::whole_worker_placement_fraction(model, workers) == Approx((4.0 * 50) / (4.0 * 50 + 3.0 * 50)));
    // A stage with twice the work takes twice the speed: 2 stages of 0.4 s and 0.8 s.
    model.forward_seconds = {0.1, 0.8};  // stage works: 0.1 + 0.3 = 0.4, and the last stage's 3 x 0.8 = 2.4
    CHECK(sim::whole_worker_placement_fraction(model, always_up({1, 6}, {-1, -1})) == Approx(1.0));
    // Bad input is named.
    CHECK_THROWS_WITH(sim::whole_worker_placement_fraction(model, {}), Catch::Contains("workers"));
    CHECK_THROWS_WITH(sim::whole_worker_placement_fraction(model, always_up({-1}, {-1})),
                      Catch::Contains("workers[0].speed"));
}

TEST_CASE("bad simulation input is refused with the field named", "[swarm][sim]") {
    auto model = small_model(60);
    const auto workers = always_up({1.0}, {0});
    model.forward_seconds.clear();
    CHECK_THROWS_WITH(sim::simulate(model, workers), Catch::Contains("forward_seconds"));
    model = small_model(60);
    CHECK_THROWS_WITH(sim::simulate(model, always_up({1.0}, {7})), Catch::Contains("workers[0].stage = 7 is invalid"));
    CHECK_THROWS_WITH(sim::simulate(model, always_up({0.0}, {0})), Catch::Contains("workers[0].speed"));
    CHECK_THROWS_WITH(sim::simulate(model, {}), Catch::Contains("workers"));
    model.microbatches_per_step = 0;
    CHECK_THROWS_WITH(sim::simulate(model, workers), Catch::Contains("microbatches_per_step = 0"));
    CHECK_THROWS_WITH(sim::failures_at_rate({1.0}, 1, -1, 0, 60, 0), Catch::Contains("failures_per_hour"));
    sim::static_pipeline_model bad{.forward_seconds = {0.1}, .replicas = 3, .microbatches_per_step = 64};
    CHECK_THROWS_WITH(sim::simulate_static(bad, {}, 0), Catch::Contains("microbatches_per_step = 64 is invalid"));
}
