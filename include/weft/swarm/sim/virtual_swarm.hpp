// A SWARM run on a virtual clock: the real trainer's policy (swarm/coordinator.hpp, with its
// router and rebalancer) over simulated workers that compute, queue, leave and arrive, so
// that an hour of a hundred workers takes seconds and gives the same answer every time
// (benchmarks/bench_swarm, docs/swarm.md). Every decision (where a call goes, when it is sent
// again, which backwards are redone, who joins or moves where, who replays a step) is the
// coordinator's; this file is only the world it acts in and the clock:
//  - A call reaches its worker after latency_seconds, waits in its queue, takes its compute
//    time (a forward, a backward with its forward, the stage's apply; a collect takes none)
//    and its answer comes back after latency_seconds. The deadline the coordinator gives it
//    is kept: past it, the call has timed out.
//  - A worker that leaves loses its queue. The trainer learns of it expiry_seconds later (its
//    heartbeats stop); until then its calls time out.
//  - A worker that arrives, or is sent for its stage's state (a move, a lost apply), serves
//    after download_seconds.
// What is not: the bytes of activations (a fixed latency each way stands for the network),
// and the trainer's own compute (summing the collected gradients).
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
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/coordinator.hpp"
#include "weft/swarm/rebalancer.hpp"
#include "weft/swarm/router.hpp"

namespace weft::swarm::sim {

// One simulated worker: its speed, the stage it starts in, and when it is up.
struct sim_worker {
    double speed = 1;                           // relative compute speed: 2 takes half the stage times given
    int stage = -1;                             // where it starts; -1: where the join rule sends it
    std::vector<std::pair<double, double>> up;  // [arrive, leave) in seconds, in order; leave may be infinite
};

struct swarm_model {
    std::vector<double> forward_seconds;  // per stage: one micro-batch's forward at speed 1
    double backward_multiple = 2;         // a backward costs this many forwards
    double latency_seconds = 0.01;        // each way between the trainer and a worker
    double download_seconds = 20;         // a joining or moving worker fetching its stage's state
    int microbatches_per_step = 1024;
    int in_flight = 0;             // micro-batches going at once; 0: all of the step's, as the real trainer
    double apply_seconds = 0.5;    // a worker's optimizer step (an apply, or a replayed one)
    double rebalance_seconds = 0;  // 0: never
    rebalance_options rebalancing;
    routing_rule routing = routing_rule::iwrr;
    int max_attempts = 8;    // sends of one call before the step fails (swarm_train --max-attempts)
    int catch_up_steps = 4;  // steps a worker behind may replay (swarm_train --catch-up-steps)
    // How long after a worker leaves the trainer learns of it: its heartbeats missed for the
    // expiry (swarm_train: 12 x --heartbeat-s 0.25). Until then its calls time out.
    double expiry_seconds = 3;
    router_options router{.ema_weight = 0.1,
                          .initial_seconds = 1.0,
                          .timeout_multiple = 4,
                          .timeout_floor_seconds = 1.0,
                          .timeout_penalty = 2};
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
        require(expiry_seconds >= 0 && std::isfinite(expiry_seconds), "expiry_seconds", expiry_seconds,
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
    // Compute seconds at speed 1 a micro-batch costs over all stages: the fluid optimum's divisor.
    [[nodiscard]] double work_per_microbatch() const {
        double work = 0;
        for (std::size_t k = 0; k < forward_seconds.size(); ++k) work += stage_work(k);
        return work;
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

// The simulated side of the run: workers that compute, queue, leave and arrive on a virtual
// clock, and the trainer's clock (deadlines, the heartbeat expiry, download times). Every
// decision is swarm::coordinator's, as in the real trainer.
class virtual_swarm {
public:
    virtual_swarm(const swarm_model& model, const std::vector<sim_worker>& workers)
        : model_(model), stages_(static_cast<int>(model.forward_seconds.size())), policy_(policy_options(model)) {
        require(!workers.empty(), "workers", workers.size(), "must hold at least one worker");
        for (std::size_t i = 0; i < workers.size(); ++i) {
            const sim_worker& w = workers[i];
            require(w.speed > 0 && std::isfinite(w.speed), "workers[" + std::to_string(i) + "].speed", w.speed,
                    "must be finite and > 0");
            require(w.stage >= -1 && w.stage < stages_, "workers[" + std::to_string(i) + "].stage", w.stage,
                    "must be -1 (the join rule) or a stage in [0, " + std::to_string(stages_) + ")");
            double last = -1;
            for (const auto& [arrive, leave] : w.up) {
                require(arrive >= 0 && arrive > last && leave > arrive, "workers[" + std::to_string(i) + "].up", arrive,
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
    }

    swarm_outcome run() {
        policy_.begin_step();
        while (!events_.empty()) {
            const event e = events_.top();
            if (e.time > model_.duration_seconds) break;
            events_.pop();
            advance_clock(e.time);
            // A step's end (after an apply's answer) changes membership too: see drive().
            placement_stale_ = placement_stale_ || may_change_placement(e);
            handle(e);
            drive();
        }
        advance_clock(model_.duration_seconds);
        count_step_calls();
        out_.seconds = model_.duration_seconds;
        return out_;
    }

private:
    static coordinator_options policy_options(const swarm_model& m) {
        m.validate();
        return {.stages = static_cast<int>(m.forward_seconds.size()),
                .microbatches = m.microbatches_per_step,
                .max_in_flight = m.in_flight,
                .max_attempts = m.max_attempts,
                .catch_up_steps = m.catch_up_steps,
                .catch_up_timeout_seconds = std::max(m.expiry_seconds, 4 * m.apply_seconds + 1),
                .routing = m.routing,
                .router = m.router,
                .rebalancing = m.rebalancing,
                .seed = m.seed};
    }

    enum class event_kind { arrive, leave, expire, downloaded, deliver, computed, reply, timeout };
    struct event {
        double time;
        std::uint64_t order;  // ties in the order pushed: the run is deterministic
        event_kind kind;
        std::uint64_t subject;  // a worker, a member or a call
        std::uint64_t epoch;    // a worker's epoch when pushed: events of an earlier life are void
        friend bool operator>(const event& a, const event& b) {
            return a.time != b.time ? a.time > b.time : a.order > b.order;
        }
    };
    struct worker_state {
        double speed = 1;
        int first_stage = -1;
        bool up = false;
        std::uint64_t epoch = 0;  // bumped when it leaves or fetches state anew: its queued work is void
        // Its member id: new for every arrival, as a worker that announces itself again is a new
        // process; kept through moves and rejoins, as the real trainer keeps it.
        worker_id member = 0;
        std::deque<std::uint64_t> queue;  // calls delivered, not started
        bool busy = false;
    };
    struct call_state {
        std::size_t worker;
        call_kind kind;
        double compute_seconds;
        int holds = 0;  // its events still queued, and its place in a worker's queue: the record goes with the last
    };

    void push(double time, event_kind kind, std::uint64_t subject, std::uint64_t epoch = 0) {
        events_.push({time, order_++, kind, subject, epoch});
    }
    void push_call_event(double time, event_kind kind, std::uint64_t call, std::uint64_t epoch = 0) {
        ++calls_.at(call).holds;
        push(time, kind, call, epoch);
    }
    void release(std::uint64_t call) {
        const auto it = calls_.find(call);
        if (--it->second.holds == 0) calls_.erase(it);
    }
    void clear_queue(worker_state& w) {
        for (const std::uint64_t c : w.queue) release(c);
        w.queue.clear();
    }
    [[nodiscard]] static bool about_a_call(event_kind kind) {
        return kind == event_kind::deliver || kind == event_kind::computed || kind == event_kind::reply ||
               kind == event_kind::timeout;
    }
    // The optimum, and what the placement allowed: the slowest stage's serving workers (up, and
    // ready in the policy) computing without pause.
    void advance_clock(double t) {
        t = std::min(t, model_.duration_seconds);
        out_.optimal_microbatches += up_speed_ * (t - now_) / work_per_microbatch_;
        if (placement_stale_) {
            std::vector<double> ready_speed(std::size_t(stages_), 0.0);
            for (const auto& w : workers_) {
                if (!w.up) continue;
                const member_state* m = policy_.member(w.member);
                if (m != nullptr && m->live && m->ready) ready_speed[std::size_t(m->stage)] += w.speed;
            }
            placement_rate_ = std::numeric_limits<double>::infinity();
            for (int k = 0; k < stages_; ++k)
                placement_rate_ =
                    std::min(placement_rate_, ready_speed[std::size_t(k)] / model_.stage_work(std::size_t(k)));
            placement_stale_ = false;
        }
        out_.placement_microbatches += placement_rate_ * (t - now_);
        now_ = t;
    }
    // Whether an event may change who serves where: anything but a forward's or a backward's
    // way through the network and a worker's queue (those change no membership).
    [[nodiscard]] bool may_change_placement(const event& e) const {
        switch (e.kind) {
            case event_kind::deliver:
            case event_kind::computed:
                return false;
            case event_kind::reply:
            case event_kind::timeout: {
                const call_kind kind = calls_.at(e.subject).kind;
                return kind != call_kind::forward && kind != call_kind::backward && kind != call_kind::collect;
            }
            default:
                return true;
        }
    }

    void handle(const event& e) {
        switch (e.kind) {
            case event_kind::arrive:
                arrive(std::size_t(e.subject));
                break;
            case event_kind::leave:
                leave(std::size_t(e.subject));
                break;
            case event_kind::expire:
                policy_.failed(e.subject);
                break;
            case event_kind::downloaded: {
                const worker_state& w = workers_[std::size_t(e.subject)];
                if (w.up && w.epoch == e.epoch) policy_.ready(w.member, policy_.step());
                break;
            }
            case event_kind::deliver:
                deliver(e.subject, e.epoch);
                break;
            case event_kind::computed:
                computed(e.subject, e.epoch);
                break;
            case event_kind::reply:
                static_cast<void>(policy_.answered(e.subject, calls_.at(e.subject).compute_seconds));
                break;
            case event_kind::timeout:
                policy_.timed_out(e.subject);
                break;
        }
        if (about_a_call(e.kind)) release(e.subject);
    }

    // What the policy asks for, until it asks for nothing: calls, workers sent for their state,
    // and the step's phases (apply once summed, the next step once applied).
    void drive() {
        while (true) {
            if (policy_.phase() == step_phase::summed) policy_.begin_apply();
            if (policy_.phase() == step_phase::applied) finish_step();
            const auto calls = policy_.take_calls();
            const auto rejoins = policy_.take_rejoins();
            if (calls.empty() && rejoins.empty() && policy_.phase() != step_phase::summed &&
                policy_.phase() != step_phase::applied)
                return;
            for (const worker_id id : rejoins) fetch_state(id);
            for (const call& c : calls) send(c);
        }
    }
    void finish_step() {
        policy_.end_step();
        out_.microbatches += model_.microbatches_per_step;
        ++out_.steps;
        // Every rebalancing period, between steps, as the real trainer: no move while a worker
        // is on its way in, whose pool the loads would not count yet.
        if (model_.rebalance_seconds > 0 && now_ - last_rebalance_ >= model_.rebalance_seconds &&
            !policy_.anyone_joining()) {
            last_rebalance_ = now_;
            if (policy_.rebalance()) ++out_.moves;
        }
        count_step_calls();
        policy_.begin_step();
    }
    void count_step_calls() {
        out_.calls += policy_.counts().calls;
        out_.retried_calls += policy_.counts().retried_calls;
        out_.redone_backwards += policy_.counts().redone_backwards;
    }

    // ---- the workers ----------------------------------------------------------------------
    void arrive(std::size_t i) {
        worker_state& w = workers_[i];
        w.up = true;
        ++w.epoch;
        up_speed_ += w.speed;
        ++out_.arrivals;
        w.member = next_member_++;
        owner_[w.member] = i;
        // Those there from the start may be placed, and hold the initial weights; later arrivals
        // follow the join rule and download their stage's state.
        policy_.admit(w.member, now_ == 0 ? w.first_stage : -1);
        if (now_ == 0)
            policy_.ready(w.member, policy_.step());
        else
            push(now_ + model_.download_seconds, event_kind::downloaded, i, w.epoch);
    }
    void leave(std::size_t i) {
        worker_state& w = workers_[i];
        if (!w.up) return;
        up_speed_ -= w.speed;
        ++out_.departures;
        w.up = w.busy = false;
        clear_queue(w);
        ++w.epoch;  // its calls in the network and in its queue are lost
        // The trainer learns of it when its heartbeats have been missing for the expiry; until
        // then its calls time out.
        push(now_ + model_.expiry_seconds, event_kind::expire, w.member);
    }
    // A member sent for its (new) stage's state: whatever it had queued is void.
    void fetch_state(worker_id member) {
        const std::size_t i = owner_.at(member);
        worker_state& w = workers_[i];
        if (!w.up || w.member != member) return;
        ++w.epoch;
        clear_queue(w);
        w.busy = false;
        push(now_ + model_.download_seconds, event_kind::downloaded, i, w.epoch);
    }
    void send(const call& c) {
        const std::size_t i = owner_.at(c.worker);
        const worker_state& w = workers_[i];
        const double forward = model_.forward_seconds[std::size_t(c.stage)];
        double compute = 0;
        switch (c.kind) {
            case call_kind::forward:
                compute = forward / w.speed;
                break;
            case call_kind::backward:
                compute = (1 + model_.backward_multiple) * forward / w.speed;
                break;
            case call_kind::collect:
                compute = 0;
                break;
            case call_kind::apply:
            case call_kind::catch_up:
                compute = model_.apply_seconds;
                break;
        }
        calls_[c.id] = {.worker = i, .kind = c.kind, .compute_seconds = compute, .holds = 0};
        push_call_event(now_ + model_.latency_seconds, event_kind::deliver, c.id, w.epoch);
        push_call_event(now_ + c.due_after_seconds, event_kind::timeout, c.id);
    }
    void deliver(std::uint64_t c, std::uint64_t epoch) {
        worker_state& w = workers_[calls_.at(c).worker];
        if (!w.up || w.epoch != epoch) return;  // it left (or started over) on the way
        ++calls_.at(c).holds;
        w.queue.push_back(c);
        start_next(calls_.at(c).worker);
    }
    void start_next(std::size_t i) {
        worker_state& w = workers_[i];
        if (w.busy || w.queue.empty()) return;
        const std::uint64_t c = w.queue.front();
        w.queue.pop_front();
        w.busy = true;
        push_call_event(now_ + calls_.at(c).compute_seconds, event_kind::computed, c, w.epoch);
        release(c);
    }
    void computed(std::uint64_t c, std::uint64_t epoch) {
        const std::size_t i = calls_.at(c).worker;
        worker_state& w = workers_[i];
        if (!w.up || w.epoch != epoch) return;
        w.busy = false;
        push_call_event(now_ + model_.latency_seconds, event_kind::reply, c);
        start_next(i);
    }

    swarm_model model_;
    int stages_;
    coordinator policy_;
    double work_per_microbatch_ = model_.work_per_microbatch();
    std::vector<worker_state> workers_;
    std::map<worker_id, std::size_t> owner_;  // member id -> the worker it was given to
    worker_id next_member_ = 0;
    std::unordered_map<std::uint64_t, call_state> calls_;
    std::priority_queue<event, std::vector<event>, std::greater<>> events_;
    std::uint64_t order_ = 0;
    double now_ = 0;
    double up_speed_ = 0;
    double last_rebalance_ = 0;
    // The slowest stage's rate its serving workers allow, kept until membership may change.
    double placement_rate_ = 0;
    bool placement_stale_ = true;
    swarm_outcome out_;
};

}  // namespace detail

// Runs `model` over `workers` on the virtual clock.
[[nodiscard]] inline swarm_outcome simulate(const swarm_model& model, const std::vector<sim_worker>& workers) {
    return detail::virtual_swarm(model, workers).run();
}

}  // namespace weft::swarm::sim
