// The SWARM rebalancer: one worker moves from a least loaded stage to the most loaded one when
// that helps, never emptying a stage and never trading a worker back; joins go to the most
// loaded stage.
#include <catch2/catch.hpp>
#include <algorithm>
#include <initializer_list>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/rebalancer.hpp"

using weft::swarm::most_loaded_stage;
using weft::swarm::plan_move;
using weft::swarm::stage_load;
using weft::swarm::worker_id;

namespace {

// A stage whose workers, numbered from `first_id`, make the given micro-batches per second.
stage_load pool(worker_id first_id, std::initializer_list<double> rates) {
    stage_load s;
    for (const double r : rates) s.workers.push_back({first_id++, r});
    return s;
}

// The loads after `move` came true as predicted: the worker serves its new stage at its
// ratio to that pool's mean.
std::vector<stage_load> after(std::vector<stage_load> stages, const weft::swarm::worker_move& move) {
    auto& from = stages[std::size_t(move.from)];
    auto& to = stages[std::size_t(move.to)];
    const double ratio_mean = from.mean_rate();
    for (auto it = from.workers.begin(); it != from.workers.end(); ++it)
        if (it->id == move.worker) {
            const double there = it->microbatches_per_second / ratio_mean * to.mean_rate();
            from.workers.erase(it);
            to.workers.push_back({move.worker, there});
            break;
        }
    return stages;
}

double bottleneck(const std::vector<stage_load>& stages) {
    double least = 1e300;
    for (const auto& s : stages) least = std::min(least, s.microbatches_per_second());
    return least;
}

}  // namespace

TEST_CASE("balanced stages make no move", "[swarm][rebalance]") {
    const std::vector<stage_load> stages{pool(0, {1, 1}), pool(2, {1, 1}), pool(4, {1, 1})};
    CHECK_FALSE(plan_move(stages).has_value());
}

TEST_CASE("a worker moves from the fastest pool to the bottleneck, and the pipeline speeds up", "[swarm][rebalance]") {
    // Stage 1's workers are a quarter as fast; stage 2 has four workers.
    const std::vector<stage_load> stages{pool(0, {1, 1}), pool(2, {0.25, 0.25}), pool(4, {1, 1, 1, 1})};
    const auto move = plan_move(stages);
    REQUIRE(move.has_value());
    CHECK(move->from == 2);
    CHECK(move->to == 1);
    CHECK(move->bottleneck_before == Approx(0.5));
    // It serves stage 1 at that pool's mean rate: 0.5 + 0.25.
    CHECK(move->bottleneck_after == Approx(0.75));
    const auto moved = after(stages, *move);
    CHECK(bottleneck(moved) > bottleneck(stages));
    // Repeating converges: every move raises the bottleneck stage or leaves it, never lowers it,
    // and no worker ever goes back to the stage it came from.
    auto current = moved;
    std::vector<weft::swarm::worker_move> moves{*move};
    for (int period = 0; period < 10; ++period) {
        const auto next = plan_move(current);
        if (!next) break;
        for (const auto& m : moves) CHECK_FALSE((m.worker == next->worker && m.from == next->to));
        const double before = bottleneck(current);
        current = after(current, *next);
        CHECK(bottleneck(current) >= before);
        moves.push_back(*next);
    }
    CHECK_FALSE(plan_move(current).has_value());
}

TEST_CASE("a stage is never emptied, however fast its only worker", "[swarm][rebalance]") {
    const std::vector<stage_load> stages{pool(0, {100}), pool(1, {0.1, 0.1}), pool(3, {100})};
    CHECK_FALSE(plan_move(stages).has_value());
    // With a second worker there, one may go.
    const std::vector<stage_load> two{pool(0, {100, 100}), pool(2, {0.1, 0.1}), pool(4, {100})};
    const auto move = plan_move(two);
    REQUIRE(move.has_value());
    CHECK(move->from == 0);
}

TEST_CASE("a move must clear the margin, so noise does not move workers back and forth", "[swarm][rebalance]") {
    // Moving one of stage 0's three workers would leave 2.0 against stage 1's 1.95: not 5 % more.
    const std::vector<stage_load> close{pool(0, {1, 1, 1}), pool(3, {0.975, 0.975})};
    CHECK_FALSE(plan_move(close).has_value());
    CHECK(plan_move(close, {.min_gain = 0}).has_value());
}

TEST_CASE("a heterogeneous pool moves the worker that leaves both stages fastest", "[swarm][rebalance]") {
    // Stage 0 has a fast worker (4 calls/s) and three slow ones; stage 1 is short of capacity.
    const std::vector<stage_load> stages{pool(0, {4, 1, 1, 1}), pool(4, {1, 1})};
    const auto move = plan_move(stages);
    REQUIRE(move.has_value());
    // The fast one is 4 / 1.75 = 2.29 times its pool's mean, so it would serve stage 1 at 2.29
    // calls/s and leave 3 behind: the pair's bottleneck becomes min(3, 4.29) = 3. A slow one
    // would leave 6 against 2 + 0.57: a bottleneck of 2.57. The fast one goes.
    CHECK(move->worker == 0);
    CHECK(move->bottleneck_after == Approx(3.0));
}

TEST_CASE("a pool's rate adds its forward and backward times, whichever came last", "[swarm][rebalance]") {
    using weft::swarm::call_class;
    weft::swarm::router route(0);
    route.join(1);
    route.join(2);
    route.join(3);
    // Worker 1: forwards of 0.1 s, backwards of 0.3 s: 2.5 micro-batches/s. Its last calls are
    // backwards, as at a step's end; one EMA of all calls would say about 0.3 s a call.
    for (int i = 0; i < 20; ++i) route.finished(1, 0.1, call_class::forward);
    for (int i = 0; i < 20; ++i) route.finished(1, 0.3, call_class::backward);
    // Worker 2: twice as fast. Worker 3: no forward timed yet, so the pool's mean stands in.
    route.finished(2, 0.05, call_class::forward);
    route.finished(2, 0.15, call_class::backward);
    route.finished(3, 0.3, call_class::backward);
    const std::vector<worker_id> ids{1, 2, 3};
    const call_class middle[] = {call_class::forward, call_class::backward};
    const stage_load load = weft::swarm::load_from_router(route, ids, middle, 1.0);
    REQUIRE(load.workers.size() == 3);
    CHECK(load.workers[0].microbatches_per_second == Approx(2.5));
    CHECK(load.workers[1].microbatches_per_second == Approx(5.0));
    CHECK(load.workers[2].microbatches_per_second == Approx(3.75));
    // The last stage's one call is its backward.
    const call_class last[] = {call_class::backward};
    CHECK(weft::swarm::load_from_router(route, ids, last, 1.0).workers[0].microbatches_per_second ==
          Approx(1 / 0.3));
    // With no worker timed, each counts at 1 / the guess.
    weft::swarm::router fresh(1);
    fresh.join(5);
    const std::vector<worker_id> five{5};
    CHECK(weft::swarm::load_from_router(fresh, five, middle, 0.5).workers[0].microbatches_per_second == Approx(2.0));
}

TEST_CASE("a joining worker goes to the most loaded stage", "[swarm][rebalance]") {
    CHECK(most_loaded_stage(std::vector<stage_load>{pool(0, {1, 1}), pool(2, {0.5}), pool(3, {1, 1})}) == 1);
    // Equal throughput: the fewest workers; then the lowest index.
    CHECK(most_loaded_stage(std::vector<stage_load>{pool(0, {1, 1}), pool(2, {2}), pool(3, {1, 1})}) == 1);
    CHECK(most_loaded_stage(std::vector<stage_load>{pool(0, {1}), pool(1, {1})}) == 0);
    // An empty stage is the most loaded of all.
    CHECK(most_loaded_stage(std::vector<stage_load>{pool(0, {1}), stage_load{}, pool(1, {1})}) == 1);
}

TEST_CASE("bad loads are refused with the field named", "[swarm][rebalance]") {
    CHECK_THROWS_WITH(most_loaded_stage(std::vector<stage_load>{}), Catch::Contains("swarm stages"));
    CHECK_THROWS_WITH(plan_move(std::vector<stage_load>{pool(0, {1, -1})}),
                      Catch::Contains("stage 0 worker 1 micro-batches per second") && Catch::Contains("-1"));
    CHECK_THROWS_AS(plan_move(std::vector<stage_load>{pool(0, {1})}, {.min_gain = -1}), weft::error);
}
