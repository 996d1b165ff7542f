// A SWARM run on a virtual clock: the same router (swarm/router.hpp) and rebalancer
// (swarm/rebalancer.hpp) as the real trainer, over simulated workers that compute, queue,
// time out, leave and join, so that an hour of a hundred workers takes seconds and gives the
// same answer every time (benchmarks/bench_swarm, docs/swarm.md).
//
// What is modelled, as the real run does it (swarm/net/trainer.hpp):
//  - A step is a global batch of micro-batches; the trainer keeps up to `in_flight` of them
//    going. Each goes forward stage by stage (one call each) and back (one call each, which
//    recomputes the forward; the last stage's one call is forward, loss and backward). Every
//    call goes to the worker its stage's router picks and waits in that worker's queue.
//  - A call times out after the router's timeout for that worker, stretched by the calls
//    already queued there, and is sent elsewhere; the late worker's work is wasted.
//  - A worker that leaves loses its queue; the trainer finds out by the timeouts. Backwards
//    whose contribution it held are redone at the end of the step, by another worker of its
//    stage, before the step's collect-and-apply barrier.
//  - A worker that arrives goes to the most loaded stage and serves after downloading that
//    stage's state (download_seconds). Every rebalancing period, at a step's end, one worker
//    may move to the most loaded stage, downloading its state likewise.
// What is not: the bytes of activations (a fixed latency each way stands for the network),
// and the collect-and-apply itself beyond a fixed barrier time.
//
// The optimum it is measured against is the fluid bound: at each instant, every worker up
// (downloading or not) computing without pause, perfectly divided among the stages,
// integrated over the run. No assignment of whole workers beats it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/owed_calls.hpp"
#include "weft/swarm/rebalancer.hpp"
#include "weft/swarm/router.hpp"

namespace weft::swarm::sim {

enum class routing_policy { iwrr, round_robin };

// One simulated worker: its speed, the stage it starts in, and when it is up.
struct sim_worker {
    double speed = 1;  // relative compute speed: 2 takes half the stage times given
    int stage = -1;    // where it starts; -1: where the join rule sends it
    std::vector<std::pair<double, double>> up;  // [arrive, leave) in seconds, in order; leave may be infinite
};

struct swarm_model {
    std::vector<double> forward_seconds;  // per stage: one micro-batch's forward at speed 1
    double backward_multiple = 2;         // a backward costs this many forwards
    double latency_seconds = 0.01;        // each way between the trainer and a worker
    double download_seconds = 20;         // a joining or moving worker fetching its stage's state
    int microbatches_per_step = 1024;
    int in_flight = 0;                    // micro-batches going at once; 0: all of the step's, as the real trainer
    double apply_seconds = 0.5;           // the step's collect and apply, a barrier
    double rebalance_seconds = 0;         // 0: never
    rebalance_options rebalancing;
    routing_policy routing = routing_policy::iwrr;
    router_options router{.ema_weight = 0.1, .initial_seconds = 1.0, .timeout_multiple = 4,
                          .timeout_floor_seconds = 1.0, .timeout_penalty = 2};
    double duration_seconds = 3600;
    std::uint64_t seed = 0;

    void validate() const {
        require(!forward_seconds.empty(), "forward_seconds", forward_seconds.size(), "must name at least one stage");
        for (std::size_t k = 0; k < forward_seconds.size(); ++k)
            require(forward_seconds[k] > 0 && std::isfinite(forward_seconds[k]),
                    "forward_seconds[" + std::to_string(k) + "]", forward_seconds[k], "must be finite and > 0");
        require(backward_multiple >= 0 && std::isfinite(backward_multiple), "backward_multiple", backward_multiple,
                "must be finite and >= 0");
        require(latency_seconds >= 0 && std::isfinite(latency_seconds), "latency_seconds", latency_seconds,
                "must be finite and >= 0");
        require(download_seconds >= 0 && std::isfinite(download_seconds), "download_seconds", download_seconds,
                "must be finite and >= 0");
        require(microbatches_per_step >= 1, "microbatches_per_step", microbatches_per_step, "must be at least 1");
        require(in_flight >= 0, "in_flight", in_flight, "must be >= 0 (0: all of a step's)");
        require(apply_seconds >= 0 && std::isfinite(apply_seconds), "apply_seconds", apply_seconds,
                "must be finite and >= 0");
        require(rebalance_seconds >= 0, "rebalance_seconds", rebalance_seconds, "must be >= 0 (0: never)");
        require(duration_seconds > 0 && std::isfinite(duration_seconds), "duration_seconds", duration_seconds,
                "must be finite and > 0");
    }
    // Compute seconds at speed 1 a micro-batch costs at stage k: a forward call and a
    // recomputing backward call, or the last stage's one call.
    [[nodiscard]] double stage_work(std::size_t k) const {
        const double backward_call = (1 + backward_multiple) * forward_seconds[k];
        return k + 1 == forward_seconds.size() ? backward_call : forward_seconds[k] + backward_call;
    }
};

struct swarm_outcome {
    double seconds = 0;
    long long steps = 0;
    double microbatches = 0;          // in completed steps: each counted once
    double optimal_microbatches = 0;  // the fluid bound over the same run
    // What the placement allowed: at each instant the slowest stage's ready workers computing
    // without pause, integrated. Between it and the optimum: workers downloading and stages
    // out of balance; between it and `microbatches`: the routing, the timeouts, the redone
    // work and the step barriers.
    double placement_microbatches = 0;
    long long calls = 0;
    long long retried_calls = 0;  // timed out and sent again
    long long redone_backwards = 0;
    long long moves = 0;
    long long arrivals = 0;
    long long departures = 0;

    [[nodiscard]] double microbatches_per_second() const { return seconds > 0 ? microbatches / seconds : 0; }
    [[nodiscard]] double fraction_of_optimal() const {
        return optimal_microbatches > 0 ? microbatches / optimal_microbatches : 0;
    }
    [[nodiscard]] double placement_fraction_of_optimal() const {
        return optimal_microbatches > 0 ? placement_microbatches / optimal_microbatches : 0;
    }
};

namespace detail {

class virtual_swarm {
public:
    virtual_swarm(const swarm_model& model, const std::vector<sim_worker>& workers)
        : model_(model), stages_(static_cast<int>(model.forward_seconds.size())) {
        model_.validate();
        require(!workers.empty(), "workers", workers.size(), "must hold at least one worker");
        for (int k = 0; k < stages_; ++k) {
            routers_.emplace_back(k, model_.router, model_.seed + static_cast<std::uint64_t>(k));
            work_per_microbatch_ += model_.stage_work(std::size_t(k));
        }
        round_robin_next_.assign(std::size_t(stages_), 0);
        ready_speed_.assign(std::size_t(stages_), 0.0);
        for (std::size_t i = 0; i < workers.size(); ++i) {
            const sim_worker& w = workers[i];
            require(w.speed > 0 && std::isfinite(w.speed), "workers[" + std::to_string(i) + "].speed", w.speed,
                    "must be finite and > 0");
            require(w.stage >= -1 && w.stage < stages_, "workers[" + std::to_string(i) + "].stage", w.stage,
                    "must be -1 (the join rule) or a stage in [0, " + std::to_string(stages_) + ")");
            double last = -1;
            for (const auto& [arrive, leave] : w.up) {
                require(arrive >= 0 && arrive > last && leave > arrive,
                        "workers[" + std::to_string(i) + "].up", arrive,
                        "must be intervals [arrive, leave) in increasing order, from 0");
                last = leave;
                push(arrive, event_kind::arrive, i);
                if (std::isfinite(leave)) push(leave, event_kind::leave, i);
            }
            worker_state state;
            state.speed = w.speed;
            state.first_stage = w.stage;
            workers_.push_back(std::move(state));
        }
        in_flight_cap_ = model_.in_flight > 0 ? model_.in_flight : model_.microbatches_per_step;
        stage_waiting_.resize(std::size_t(stages_));
    }

    swarm_outcome run() {
        start_step();
        while (!events_.empty()) {
            const event e = events_.top();
            if (e.time > model_.duration_seconds) break;
            events_.pop();
            advance_clock(e.time);
            handle(e);
        }
        advance_clock(model_.duration_seconds);
        out_.seconds = model_.duration_seconds;
        return out_;
    }

private:
    enum class event_kind { arrive, leave, downloaded, deliver, computed, reply, timeout, step_start };
    struct event {
        double time;
        std::uint64_t order;  // ties in the order pushed: the run is deterministic
        event_kind kind;
        std::size_t subject;  // a worker or a call
        std::uint64_t epoch;  // a worker's epoch when pushed: events of an earlier life are void
        friend bool operator>(const event& a, const event& b) {
            return a.time != b.time ? a.time > b.time : a.order > b.order;
        }
    };
    struct worker_state {
        double speed = 1;
        int first_stage = -1;
        int stage = -1;
        bool up = false;
        bool ready = false;
        std::uint64_t epoch = 0;  // bumped when it leaves or moves: its queued work is void
        // Its id in its stage's router, new for every arrival and move, as a worker that
        // announces itself again is a new member: nothing measured in an earlier life (the
        // penalties of the calls lost when it left) counts against it.
        worker_id route_id = 0;
        std::deque<std::size_t> queue;  // calls delivered, not started
        bool busy = false;
        owed_calls owed;  // the calls the trainer awaits from it: a new call waits behind them
    };
    enum class call_kind { forward, backward, redo };
    // How the router times a call: a redone backward is a backward (with its forward).
    static call_class routed_as(call_kind kind) {
        return kind == call_kind::forward ? call_class::forward : call_class::backward;
    }
    struct call_state {
        std::size_t worker;
        worker_id route_id;
        int microbatch;
        int stage;
        call_kind kind;
        double sent;
        double compute_seconds = 0;
        bool awaited = true;         // false once timed out, or its worker left
        double timeout_seconds = 0;  // its own share of the deadline (the rest: the calls ahead of it)
    };
    struct microbatch_state {
        int stage = 0;
        bool backward = false;  // on the way back
    };

    void push(double time, event_kind kind, std::size_t subject, std::uint64_t epoch = 0) {
        events_.push({time, order_++, kind, subject, epoch});
    }
    void advance_clock(double t) {
        t = std::min(t, model_.duration_seconds);
        out_.optimal_microbatches += up_speed_ * (t - now_) / work_per_microbatch_;
        double slowest = std::numeric_limits<double>::infinity();
        for (int k = 0; k < stages_; ++k)
            slowest = std::min(slowest, ready_speed_[std::size_t(k)] / model_.stage_work(std::size_t(k)));
        out_.placement_microbatches += slowest * (t - now_);
        now_ = t;
    }
    [[nodiscard]] bool is_last(int stage) const { return stage == stages_ - 1; }

    void handle(const event& e) {
        switch (e.kind) {
            case event_kind::arrive: arrive(e.subject); break;
            case event_kind::leave: leave(e.subject); break;
            case event_kind::downloaded:
                if (workers_[e.subject].up && workers_[e.subject].epoch == e.epoch) become_ready(e.subject);
                break;
            case event_kind::deliver: deliver(e.subject, e.epoch); break;
            case event_kind::computed: computed(e.subject, e.epoch); break;
            case event_kind::reply: reply(e.subject); break;
            case event_kind::timeout: timeout(e.subject); break;
            case event_kind::step_start: start_step(); break;
        }
        dispatch();
    }

    // ---- membership --------------------------------------------------------------------
    std::vector<std::size_t> ready_workers(int stage) const {
        std::vector<std::size_t> ids;
        for (std::size_t i = 0; i < workers_.size(); ++i)
            if (workers_[i].ready && workers_[i].stage == stage) ids.push_back(i);
        return ids;
    }
    std::vector<stage_load> loads() const {
        std::vector<stage_load> all;
        for (int k = 0; k < stages_; ++k) {
            std::vector<worker_id> ids;
            for (const auto i : ready_workers(k)) ids.push_back(workers_[i].route_id);
            all.push_back(load_from_router(routers_[std::size_t(k)], ids, microbatch_calls(is_last(k)),
                                           model_.router.initial_seconds));
        }
        return all;
    }
    void arrive(std::size_t i) {
        worker_state& w = workers_[i];
        w.up = true;
        up_speed_ += w.speed;
        ++out_.arrivals;
        // Those there from the start may be placed; later arrivals follow the join rule.
        w.stage = now_ == 0 && w.first_stage >= 0 ? w.first_stage : most_loaded_stage(loads());
        w.route_id = new_route_id(i);
        // The workers there at the start hold the initial weights; later ones download.
        if (now_ == 0) become_ready(i);
        else push(now_ + model_.download_seconds, event_kind::downloaded, i, w.epoch);
    }
    worker_id new_route_id(std::size_t i) {
        route_owner_.push_back(i);
        return route_owner_.size() - 1;
    }
    void become_ready(std::size_t i) {
        worker_state& w = workers_[i];
        w.ready = true;
        ready_speed_[std::size_t(w.stage)] += w.speed;
        routers_[std::size_t(w.stage)].join(w.route_id);
        // Micro-batches that found no worker of this stage go now.
        auto& waiting = stage_waiting_[std::size_t(w.stage)];
        for (const int mb : waiting) dispatchable_.push_back(mb);
        waiting.clear();
    }
    void leave(std::size_t i) {
        worker_state& w = workers_[i];
        if (!w.up) return;
        up_speed_ -= w.speed;
        ++out_.departures;
        if (w.ready) {
            routers_[std::size_t(w.stage)].failed(w.route_id);
            ready_speed_[std::size_t(w.stage)] -= w.speed;
        }
        w.up = w.ready = w.busy = false;
        w.queue.clear();
        ++w.epoch;  // its calls in the network and in its queue are lost: the timeouts find out
    }

    // ---- a step -------------------------------------------------------------------------
    void start_step() {
        microbatches_.assign(std::size_t(model_.microbatches_per_step), microbatch_state{});
        holders_.clear();
        started_ = finished_ = 0;
        in_step_ = true;
        start_more();
    }
    void start_more() {
        while (started_ < model_.microbatches_per_step && started_ - finished_ < in_flight_cap_) {
            dispatchable_.push_back(started_++);
        }
    }
    std::optional<std::size_t> pick(int stage, call_class kind) {
        router& route = routers_[std::size_t(stage)];
        if (model_.routing == routing_policy::iwrr) {
            while (const auto id = route.pick(kind)) {
                const std::size_t i = route_owner_[std::size_t(*id)];
                if (workers_[i].ready && workers_[i].stage == stage && workers_[i].route_id == *id) return i;
                route.leave(*id);
            }
            return std::nullopt;
        }
        // Uniform round-robin: every ready worker of the stage in turn, whatever its speed (a
        // cursor over all workers that skips the others: no list built for every call).
        auto& next = round_robin_next_[std::size_t(stage)];
        for (std::size_t tried = 0; tried < workers_.size(); ++tried) {
            const std::size_t i = next++ % workers_.size();
            if (workers_[i].ready && workers_[i].stage == stage) return i;
        }
        return std::nullopt;
    }
    void dispatch() {
        if (!in_step_) return;
        while (!dispatchable_.empty()) {
            const int mb = dispatchable_.front();
            dispatchable_.pop_front();
            const int stage = mb >= 0 ? microbatches_[std::size_t(mb)].stage : redo_stage(mb);
            const call_kind kind = kind_of(mb, stage);
            const auto id = pick(stage, routed_as(kind));
            if (!id) {
                stage_waiting_[std::size_t(stage)].push_back(mb);
                continue;
            }
            send(*id, mb, stage, kind);
        }
    }
    // A micro-batch's next call at `stage`: its forward, or its backward (the last stage's
    // one call does both); a redone backward (mb < 0) recomputes the forward it lost.
    [[nodiscard]] call_kind kind_of(int mb, int stage) const {
        if (mb < 0) return call_kind::redo;
        return microbatches_[std::size_t(mb)].backward || is_last(stage) ? call_kind::backward : call_kind::forward;
    }
    // Redone backwards are queued as negative numbers: -(1 + index into redo_).
    int redo_stage(int mb) const { return redo_[std::size_t(-mb - 1)].first; }

    void send(std::size_t i, int mb, int stage, call_kind kind) {
        worker_state& w = workers_[i];
        const double forward = model_.forward_seconds[std::size_t(stage)];
        const double compute = (kind == call_kind::forward ? forward : (1 + model_.backward_multiple) * forward) / w.speed;
        const std::size_t c = calls_.size();
        calls_.push_back({i, w.route_id, mb, stage, kind, now_, compute, true});
        ++out_.calls;
        // Its deadline, as the real trainer's: the router's timeout for this worker and class of
        // call, after the timeouts of the calls it already owes. (Added to the clock in this
        // order: the events' times are compared exactly, and another rounding reorders ties.)
        calls_[c].timeout_seconds = routers_[std::size_t(stage)].timeout_seconds(w.route_id, routed_as(kind));
        push(now_ + model_.latency_seconds, event_kind::deliver, c, w.epoch);
        push(now_ + w.owed.seconds() + calls_[c].timeout_seconds, event_kind::timeout, c);
        w.owed.add(calls_[c].timeout_seconds);
    }
    void deliver(std::size_t c, std::uint64_t epoch) {
        worker_state& w = workers_[calls_[c].worker];
        if (!w.up || w.epoch != epoch) return;  // it left on the way
        w.queue.push_back(c);
        start_next(calls_[c].worker);
    }
    void start_next(std::size_t i) {
        worker_state& w = workers_[i];
        if (w.busy || w.queue.empty()) return;
        const std::size_t c = w.queue.front();
        w.queue.pop_front();
        w.busy = true;
        push(now_ + calls_[c].compute_seconds, event_kind::computed, c, w.epoch);
    }
    void computed(std::size_t c, std::uint64_t epoch) {
        worker_state& w = workers_[calls_[c].worker];
        if (!w.up || w.epoch != epoch) return;
        w.busy = false;
        push(now_ + model_.latency_seconds, event_kind::reply, c);
        start_next(calls_[c].worker);
    }
    void reply(std::size_t c) {
        call_state& call = calls_[c];
        if (!call.awaited) return;  // given up on: the work was wasted
        call.awaited = false;
        worker_state& w = workers_[call.worker];
        w.owed.settle(call.timeout_seconds);
        routers_[std::size_t(call.stage)].finished(call.route_id, call.compute_seconds, routed_as(call.kind));
        if (call.kind == call_kind::redo) {
            auto& [stage, mb] = redo_[std::size_t(-call.microbatch - 1)];
            holders_[{stage, mb}] = {call.worker, w.epoch};
            ++redone_;
            ++out_.redone_backwards;
            maybe_finish_step();
            return;
        }
        microbatch_state& m = microbatches_[std::size_t(call.microbatch)];
        if (call.kind == call_kind::forward) {
            m.stage = call.stage + 1;
        } else {
            holders_[{call.stage, call.microbatch}] = {call.worker, w.epoch};
            if (call.stage == 0) {
                ++finished_;
                start_more();
                maybe_finish_step();
                return;
            }
            m.stage = call.stage - 1;
            m.backward = true;
        }
        dispatchable_.push_back(call.microbatch);
    }
    void timeout(std::size_t c) {
        call_state& call = calls_[c];
        if (!call.awaited) return;
        call.awaited = false;
        worker_state& w = workers_[call.worker];
        w.owed.settle(call.timeout_seconds);
        routers_[std::size_t(call.stage)].timed_out(call.route_id);
        ++out_.retried_calls;
        dispatchable_.push_back(call.microbatch);  // the same micro-batch (or redo), elsewhere
    }

    // Every micro-batch is back: contributions held by workers that left are redone, then
    // the barrier, then the next step (after a rebalancing move, when one is due).
    void maybe_finish_step() {
        if (finished_ < model_.microbatches_per_step || redone_ < static_cast<long long>(redo_.size())) return;
        bool lost = false;
        for (const auto& [key, holder] : holders_)
            if (workers_[holder.first].epoch != holder.second) {  // it left (or moved) since
                redo_.push_back(key);
                dispatchable_.push_back(-static_cast<int>(redo_.size()));
                lost = true;
            }
        if (lost) return;
        in_step_ = false;
        redo_.clear();
        redone_ = 0;
        out_.microbatches += model_.microbatches_per_step;
        ++out_.steps;
        rebalance();
        push(now_ + model_.apply_seconds + 2 * model_.latency_seconds, event_kind::step_start, 0);
    }
    void rebalance() {
        if (model_.rebalance_seconds <= 0 || now_ - last_rebalance_ < model_.rebalance_seconds) return;
        // As the real trainer: no move while a worker is on its way in (downloading), whose
        // pool the loads would not count yet.
        for (const auto& w : workers_)
            if (w.up && !w.ready) return;
        last_rebalance_ = now_;
        const auto move = plan_move(loads(), model_.rebalancing);
        if (!move) return;
        const std::size_t i = route_owner_[std::size_t(move->worker)];
        worker_state& w = workers_[i];
        routers_[std::size_t(w.stage)].leave(move->worker);
        ready_speed_[std::size_t(w.stage)] -= w.speed;
        w.ready = false;
        w.queue.clear();
        w.busy = false;
        ++w.epoch;
        w.stage = move->to;
        w.route_id = new_route_id(i);
        ++out_.moves;
        push(now_ + model_.download_seconds, event_kind::downloaded, i, w.epoch);
    }

    swarm_model model_;
    int stages_;
    double work_per_microbatch_ = 0;
    std::vector<router> routers_;
    std::vector<std::size_t> round_robin_next_;
    std::vector<worker_state> workers_;
    std::vector<std::size_t> route_owner_;  // router id -> the worker it was given to
    std::vector<call_state> calls_;
    std::priority_queue<event, std::vector<event>, std::greater<>> events_;
    std::uint64_t order_ = 0;
    double now_ = 0;
    double up_speed_ = 0;
    std::vector<double> ready_speed_;  // per stage: the speeds of its ready workers, summed
    double last_rebalance_ = 0;
    int in_flight_cap_ = 0;
    // The step under way.
    bool in_step_ = false;
    std::vector<microbatch_state> microbatches_;
    int started_ = 0, finished_ = 0;
    std::deque<int> dispatchable_;  // micro-batches (or, negative, redone backwards) to send
    std::vector<std::vector<int>> stage_waiting_;  // per stage: waiting for a ready worker
    // (stage, mb) -> whose contribution counts: the worker, and its epoch then.
    std::map<std::pair<int, int>, std::pair<std::size_t, std::uint64_t>> holders_;
    std::vector<std::pair<int, int>> redo_;              // (stage, mb) backwards to redo
    long long redone_ = 0;
    swarm_outcome out_;
};

}  // namespace detail

// Runs `model` over `workers` on the virtual clock.
[[nodiscard]] inline swarm_outcome simulate(const swarm_model& model, const std::vector<sim_worker>& workers) {
    return detail::virtual_swarm(model, workers).run();
}

}  // namespace weft::swarm::sim
