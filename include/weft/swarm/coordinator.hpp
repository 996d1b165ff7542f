// The SWARM trainer's policy as a state machine with no clock and no I/O: membership,
// dispatch, retry and redo, and the accounting of every (step, micro-batch) contribution.
// The real trainer (swarm/net/trainer.hpp, over ZeroMQ) and the simulated one
// (swarm/sim/virtual_swarm.hpp, on a virtual clock) both drive this one class, so the
// simulation runs the policy the real run runs; tests/swarm/coordinator_test.cpp drives it by
// hand through crashes, late replies, duplicates, joins and moves.
//
// The driver tells it what happened (a worker said hello, became ready, died; a call was
// answered, refused or timed out) and takes from it what to do (calls to send, workers to
// send back for their stage's state). The driver owns the clock: each call says how long it
// may take, and the driver reports it timed out past that. The driver owns the bytes: the
// coordinator says which micro-batch and stage a call is for, the driver keeps the tensors.
//
// A step, in phases:
//  1. computing: every micro-batch goes forward stage by stage and back, each call to the
//     worker its stage's router picks (swarm/router.hpp). A call that fails (timed out,
//     refused, its worker died) is sent again elsewhere, up to max_attempts sends. The last
//     stage's one call does forward, loss and backward.
//  2. collecting: for each (stage, micro-batch) the coordinator knows whose backward counted,
//     and asks each such worker for the sum of exactly those contributions. A worker that
//     cannot hand them over (it died, it is behind) has those backwards redone by another
//     worker of its stage. Each sample thus counts once at every stage.
//  3. summed: the driver has every stage's gradient (the sums it collected); it clips and
//     calls begin_apply.
//  4. applying: every ready worker steps with its stage's gradient. One whose apply is lost
//     fetches its state again; one that became ready meanwhile replays the step (catch-up).
//     end_step moves to the next step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/owed_calls.hpp"
#include "weft/swarm/rebalancer.hpp"
#include "weft/swarm/router.hpp"

namespace weft::swarm {

// How a stage's calls are spread over its workers: weighted by speed (swarm/router.hpp), or
// in turn whatever their speed (the baseline bench_swarm compares it with).
enum class routing_rule { iwrr, round_robin };

// What a call asks of a worker.
enum class call_kind : std::uint8_t {
    forward,   // a micro-batch's forward at a stage
    backward,  // its backward (recomputing the forward); the last stage's forward too
    collect,   // the sum of the backwards of the step that counted, for the micro-batches named
    apply,     // step the optimizer with the stage's gradient
    catch_up,  // replay a kept step's apply (a worker whose state is behind)
};

[[nodiscard]] inline const char* to_string(call_kind kind) {
    switch (kind) {
        case call_kind::forward:
            return "forward";
        case call_kind::backward:
            return "backward";
        case call_kind::collect:
            return "collect";
        case call_kind::apply:
            return "apply";
        case call_kind::catch_up:
            return "catch-up";
    }
    return "?";
}

// A call the driver is to send.
struct call {
    std::uint64_t id = 0;
    call_kind kind = call_kind::forward;
    worker_id worker = 0;
    int stage = 0;
    std::uint64_t step = 0;                  // the step it serves (catch_up: the step it replays)
    int microbatch = -1;                     // forward, backward
    std::vector<std::int32_t> microbatches;  // collect: whose contributions it sums, ascending
    bool redo = false;                       // a backward redone because its first worker was lost
    double timeout_seconds = 0;              // its own time
    double due_after_seconds = 0;            // from its sending: its own time after the calls its worker owes
};

struct coordinator_options {
    int stages = 1;
    int microbatches = 1;
    int max_in_flight = 0;                // micro-batches going at once; 0: all of the step's
    int max_attempts = 8;                 // sends of one forward or backward before the step fails
    int catch_up_steps = 4;               // applied steps a behind worker may replay (0: it fetches its state again)
    double catch_up_timeout_seconds = 3;  // a replayed step's (its worker is in no router yet)
    routing_rule routing = routing_rule::iwrr;
    router_options router{};
    rebalance_options rebalancing{};
    std::uint64_t seed = 0;

    void validate() const {
        require(stages >= 1, "stages", stages, "must be at least 1");
        require(microbatches >= 1, "--microbatches", microbatches, "must be at least 1");
        require(max_in_flight >= 0, "--in-flight", max_in_flight, "must be >= 0 (0: all of a step's)");
        require(max_attempts >= 1, "--max-attempts", max_attempts, "must be at least 1");
        require(catch_up_steps >= 0, "--catch-up-steps", catch_up_steps, "must be >= 0");
        require(catch_up_timeout_seconds > 0, "catch-up timeout", catch_up_timeout_seconds, "must be > 0");
    }
};

// One member as the coordinator sees it.
struct member_state {
    int stage = 0;
    bool live = true;        // not known dead
    bool ready = false;      // holds the current step's state and is in its stage's router
    std::uint64_t step = 0;  // the step whose state it holds (step + 1 once it applied this one)
    long long calls = 0, timeouts = 0, deaths = 0;
    owed_calls owed{};    // calls it has not answered: a new call waits behind them
    int catching_up = 0;  // replayed steps on their way
    bool catch_up_failed = false;
    bool unreachable = false;  // its connection dropped: out of its router until heard from again
};

enum class step_phase { between_steps, computing, collecting, summed, applying, applied };

// Counts over the step under way (reset by begin_step).
struct step_counts {
    long long retried_calls = 0;  // sends again after a timeout, a refusal or a death
    long long late_replies = 0;   // answers to calls not awaited (given up on, or answered already)
    long long redone_backwards = 0;
    long long calls = 0;  // calls sent, of every kind
};

class coordinator {
public:
    explicit coordinator(coordinator_options options) : options_(std::move(options)) {
        options_.validate();
        for (int k = 0; k < options_.stages; ++k)
            routers_.emplace_back(k, options_.router, options_.seed + static_cast<std::uint64_t>(k));
        round_robin_next_.assign(std::size_t(options_.stages), 0);
        waiting_.resize(std::size_t(options_.stages));
    }

    // ---- membership -------------------------------------------------------------------------
    // Worker `id` announced itself (a new process, or one starting over), asking for stage
    // `wish` (-1: none). Returns the stage it serves once it fetched that stage's state and
    // said ready. Calls it owed in an earlier life are lost.
    int admit(worker_id id, int wish) {
        if (auto it = members_.find(id); it != members_.end()) {  // an earlier life of it
            member_state& old = it->second;
            if (old.ready) routers_[std::size_t(old.stage)].leave(id);
            old.live = old.ready = false;
            collect_plan_due_ = true;
            lose_calls_of(id, old);
        }
        member_state& m = members_[id];
        const bool wish_holds = wish >= 0 && wish < options_.stages && has_state_to_fetch(wish);
        m = member_state{.stage = wish_holds ? wish : stage_to_join(), .live = true, .ready = false, .step = 0};
        return m.stage;
    }
    // Worker `id` holds step `step`'s state of its stage: it serves (at once, or after replaying
    // the steps it lacks). False for an id no member has.
    bool ready(worker_id id, std::uint64_t step) {
        const auto it = members_.find(id);
        if (it == members_.end()) return false;
        it->second.live = true;
        it->second.step = step;
        bring_up_to_date(id, it->second);
        return true;
    }
    // Worker `id`, given up on, is heard from again: it fetches its stage's state anew.
    void heard_again(worker_id id) {
        const auto it = members_.find(id);
        if (it == members_.end() || it->second.live) return;
        it->second.live = true;
        send_back(id, it->second);
    }
    // Worker `id` is gone (its connection, its heartbeats, its host): banned from its router
    // until it announces itself again; every call it owed fails now. False when it was not live.
    bool failed(worker_id id) {
        const auto it = members_.find(id);
        if (it == members_.end() || !it->second.live) return false;
        member_state& m = it->second;
        m.live = false;
        m.ready = false;
        ++m.deaths;
        collect_plan_due_ = true;  // what it held is redone
        routers_[std::size_t(m.stage)].failed(id);
        lose_calls_of(id, m);
        return true;
    }

    // Worker `id` cannot be reached just now (its connection dropped, as a flaky link's do):
    // the calls it owed fail over, and it takes no new ones until it is heard from again. Not
    // a ban: it keeps its state and its place, and if it is really gone its heartbeats stop.
    void unreachable(worker_id id) {
        const auto it = members_.find(id);
        if (it == members_.end() || !it->second.live) return;
        member_state& m = it->second;
        if (m.ready && !m.unreachable) routers_[std::size_t(m.stage)].leave(id);
        m.unreachable = true;
        const bool was_catching_up = m.catching_up > 0;
        lose_calls_of(id, m);
        if (was_catching_up) send_back(id, m);  // its replayed steps are lost: it fetches its state again
    }
    // Worker `id` was heard from: one that was unreachable takes calls again.
    void reachable(worker_id id) {
        const auto it = members_.find(id);
        if (it == members_.end() || !it->second.unreachable) return;
        member_state& m = it->second;
        m.unreachable = false;
        if (m.live && m.ready) {
            routers_[std::size_t(m.stage)].join(id);
            wake(m.stage);
        }
    }

    // Workers to send back for their stage's state (a rejoin), taken once each.
    [[nodiscard]] std::vector<worker_id> take_rejoins() { return std::exchange(rejoins_, {}); }
    // The ready workers of `stage` whose state a joiner may fetch (at this step or just past it).
    [[nodiscard]] std::vector<worker_id> state_holders(int stage, worker_id except) const {
        std::vector<worker_id> out;
        for (const auto& [id, m] : members_)
            if (id != except && m.live && m.ready && m.stage == stage && m.step >= step_) out.push_back(id);
        return out;
    }
    [[nodiscard]] int ready_count(int stage) const {
        int n = 0;
        for (const auto& [id, m] : members_) n += (m.live && m.ready && m.stage == stage) ? 1 : 0;
        return n;
    }
    // A member on its way in (fetching state, or replaying steps): no rebalancing until it is
    // in, as its pool would be judged without it.
    [[nodiscard]] bool anyone_joining() const {
        for (const auto& [id, m] : members_)
            if (m.live && !m.ready) return true;
        return false;
    }
    [[nodiscard]] const std::map<worker_id, member_state>& members() const { return members_; }
    [[nodiscard]] const member_state* member(worker_id id) const {
        const auto it = members_.find(id);
        return it == members_.end() ? nullptr : &it->second;
    }
    [[nodiscard]] const router& route(int stage) const { return routers_.at(std::size_t(stage)); }
    // Stage k's pool as the rebalancer sees it: its ready workers at their measured rates.
    [[nodiscard]] stage_load load_of(int k) const {
        std::vector<worker_id> ready;
        for (const auto& [id, m] : members_)
            if (m.live && m.ready && m.stage == k) ready.push_back(id);
        return load_from_router(routers_[std::size_t(k)], ready, microbatch_calls(is_last(k)),
                                options_.router.initial_seconds);
    }
    // The rebalancing rule, when the driver's period is due and no one is joining: at most one
    // worker leaves its pool for the most loaded stage, and is sent for that stage's state.
    std::optional<worker_move> rebalance() {
        std::vector<stage_load> loads;
        for (int k = 0; k < options_.stages; ++k) loads.push_back(load_of(k));
        const auto move = plan_move(loads, options_.rebalancing);
        if (!move) return std::nullopt;
        member_state& m = members_.at(move->worker);
        routers_[std::size_t(m.stage)].leave(move->worker);
        m.ready = false;
        m.stage = move->to;
        send_back(move->worker, m);
        return move;
    }

    // The run goes on from `step`, whose state a checkpoint holds for every stage (a resumed
    // run, or one that lost a stage), or step 0 (the initial weights): a step under way is
    // abandoned, every member fetches its stage's state again, calls owed are forgotten, and a
    // stage with no worker takes joiners, who fetch it from the checkpoint.
    void restart_at(std::uint64_t step) {
        phase_ = step_phase::between_steps;
        queue_.clear();
        for (auto& w : waiting_) w.clear();
        redo_.clear();
        collecting_.clear();
        uncollected_.clear();
        applies_out_ = 0;
        lost_applies_.clear();
        pending_.clear();
        outbox_.clear();
        kept_.clear();
        step_ = step;
        restorable_step_ = step;
        for (auto& [id, m] : members_) {
            m.owed.clear();
            m.catching_up = 0;
            if (m.live) send_back(id, m);
        }
    }
    // Whether a joiner of `stage` can fetch its state: the initial weights (step 0), a
    // checkpoint of this step (restart_at), or a worker that holds it. A stage without is lost:
    // the run can go on only from a checkpoint.
    [[nodiscard]] bool has_state_to_fetch(int stage) const {
        return step_ == 0 || restorable() || ready_count(stage) > 0;
    }
    // In the applied phase: a stage none of whose workers stepped (its state is gone).
    [[nodiscard]] std::optional<int> stage_without_apply() const {
        if (phase_ != step_phase::applied) return std::nullopt;
        for (int k = 0; k < options_.stages; ++k)
            if (applied_[std::size_t(k)] == 0) return k;
        return std::nullopt;
    }
    // Whether every stage's state of this step is in a checkpoint the driver serves.
    [[nodiscard]] bool restorable() const { return restorable_step_ && *restorable_step_ == step_; }

    // ---- a step -----------------------------------------------------------------------------
    void begin_step() {
        require(phase_ == step_phase::between_steps, "begin_step in phase", int(phase_), "must follow end_step");
        phase_ = step_phase::computing;
        counts_ = {};
        tasks_.assign(std::size_t(options_.microbatches), task{});
        accepted_.clear();
        uncollected_.clear();
        collected_.assign(std::size_t(options_.stages), {});
        collecting_.clear();
        redo_.clear();
        queue_.clear();
        for (auto& w : waiting_) w.clear();
        started_ = finished_ = 0;
        start_more();
    }

    // The calls to send now. A driver that cannot send one reports its worker unreachable.
    [[nodiscard]] std::vector<call> take_calls() {
        if (phase_ == step_phase::collecting && collect_plan_due_) plan_collects();
        // Calls made outside the queue go first: they were issued first, so the calls their
        // workers owe (which a deadline counts) are those sent ahead of them.
        std::vector<call> out = std::exchange(outbox_, {});
        while (!queue_.empty()) {
            const work w = queue_.front();
            queue_.pop_front();
            if (!still_wanted(w)) continue;
            const call_class cls = is_backward(w) ? call_class::backward : call_class::forward;
            const auto id = pick(w.stage, cls);
            if (!id) {
                waiting_[std::size_t(w.stage)].push_back(w);
                continue;
            }
            call c{.kind = is_backward(w) ? call_kind::backward : call_kind::forward,
                   .worker = *id,
                   .stage = w.stage,
                   .step = step_,
                   .microbatch = w.microbatch,
                   .microbatches = {},
                   .redo = w.redo};
            if (w.redo)
                redo_.at({w.stage, w.microbatch}).in_flight = true;
            else
                tasks_[std::size_t(w.microbatch)].in_flight = true;
            out.push_back(issue(std::move(c)));
        }
        return out;
    }

    // The call `id` as sent, while it is awaited (nullptr: never sent, or answered or given up on).
    [[nodiscard]] const call* awaited(std::uint64_t id) const {
        const auto it = pending_.find(id);
        return it == pending_.end() ? nullptr : &it->second;
    }

    // Call `id` was answered after `seconds` of the worker's compute. Returns the call when it
    // was awaited (the driver keeps its results), nothing for a late or a duplicate answer.
    std::optional<call> answered(std::uint64_t id, double seconds) {
        auto it = pending_.find(id);
        if (it == pending_.end()) {
            ++counts_.late_replies;
            return std::nullopt;
        }
        call c = std::move(it->second);
        pending_.erase(it);
        member_state& m = members_.at(c.worker);
        m.owed.settle(c.timeout_seconds);
        if (c.kind == call_kind::catch_up) {
            caught_up(c.worker, true);
            return c;
        }
        if (c.kind == call_kind::forward || c.kind == call_kind::backward)
            routers_[std::size_t(c.stage)].finished(
                c.worker, seconds, c.kind == call_kind::forward ? call_class::forward : call_class::backward);
        ++m.calls;
        switch (c.kind) {
            case call_kind::forward:
                forwarded(c);
                break;
            case call_kind::backward:
                c.redo ? redone(c) : backed(c);
                break;
            case call_kind::collect:
                collected(c);
                break;
            case call_kind::apply:
                applied(c, true);
                break;
            case call_kind::catch_up:
                break;
        }
        return c;
    }
    // Call `id` timed out: its worker is penalised in its router, and the work goes elsewhere.
    void timed_out(std::uint64_t id) {
        const auto it = pending_.find(id);
        if (it == pending_.end()) return;
        call c = std::move(it->second);
        pending_.erase(it);
        member_state& m = members_.at(c.worker);
        m.owed.settle(c.timeout_seconds);
        ++m.timeouts;
        if (c.kind != call_kind::catch_up) routers_[std::size_t(c.stage)].timed_out(c.worker);
        lost(c, "timed out");
    }
    // Call `id` was refused by a worker that holds step `worker_step`'s state: the work goes
    // elsewhere, and a worker holding another step's state fetches the current one.
    void refused(std::uint64_t id, std::uint64_t worker_step, const std::string& why) {
        const auto it = pending_.find(id);
        if (it == pending_.end()) {
            ++counts_.late_replies;
            return;
        }
        call c = std::move(it->second);
        pending_.erase(it);
        member_state& m = members_.at(c.worker);
        m.owed.settle(c.timeout_seconds);
        lost(c, "refused: " + why);
        if (c.kind != call_kind::catch_up && worker_step != step_ && m.live) send_back(c.worker, m);
    }

    // The stages with work that found no live worker (the driver bounds how long they wait).
    [[nodiscard]] std::vector<int> starved_stages() const {
        std::vector<int> out;
        for (int k = 0; k < options_.stages; ++k)
            if (!waiting_[std::size_t(k)].empty()) out.push_back(k);
        return out;
    }

    // Phase 3: every stage's gradient was collected; every ready worker steps with it.
    void begin_apply() {
        require(phase_ == step_phase::summed, "begin_apply in phase", int(phase_), "must follow the collection");
        phase_ = step_phase::applying;
        applied_.assign(std::size_t(options_.stages), 0);
        for (auto& [id, m] : members_) {
            if (!(m.live && m.ready && m.step == step_)) continue;
            outbox_.push_back(
                issue({.kind = call_kind::apply, .worker = id, .stage = m.stage, .step = step_, .microbatches = {}}));
            ++applies_out_;
        }
        if (applies_out_ == 0) phase_ = step_phase::applied;
    }
    // The step is over: throws when a stage lost every worker while stepping (no one holds its
    // state), sends the lost and the behind for their state, and moves on to the next step.
    void end_step() {
        require(phase_ == step_phase::applied, "end_step in phase", int(phase_), "must follow every apply's answer");
        for (int k = 0; k < options_.stages; ++k)
            if (applied_[std::size_t(k)] == 0)
                throw error("stage " + std::to_string(k) + " lost every worker while stepping at step " +
                            std::to_string(step_) + ": no one holds its state any more, the run cannot go on");
        // Ready members not stepped became ready while the applies went out: they replay it.
        std::vector<worker_id> behind;
        for (auto& [id, m] : members_)
            if (m.live && m.ready && m.step != step_ + 1) {
                routers_[std::size_t(m.stage)].leave(id);
                m.ready = false;
                behind.push_back(id);
            }
        if (options_.catch_up_steps > 0) {
            kept_.push_back(step_);
            while (kept_.size() > static_cast<std::size_t>(options_.catch_up_steps)) kept_.pop_front();
        }
        ++step_;
        phase_ = step_phase::between_steps;
        for (const worker_id id : lost_applies_) send_back(id, members_.at(id));
        lost_applies_.clear();
        for (const worker_id id : behind) bring_up_to_date(id, members_.at(id));
    }

    [[nodiscard]] step_phase phase() const { return phase_; }
    [[nodiscard]] std::uint64_t step() const { return step_; }
    [[nodiscard]] const step_counts& counts() const { return counts_; }
    // Whose backward counted for (stage, micro-batch) this step.
    [[nodiscard]] const std::map<std::pair<int, int>, worker_id>& accepted() const { return accepted_; }
    // The micro-batches each stage's collected sums cover, this step.
    [[nodiscard]] const std::vector<std::set<int>>& collected() const { return collected_; }
    // The steps a behind worker may replay (their gradients the driver keeps), oldest first.
    [[nodiscard]] const std::deque<std::uint64_t>& kept_steps() const { return kept_; }
    [[nodiscard]] bool is_last(int stage) const { return stage == options_.stages - 1; }
    [[nodiscard]] const coordinator_options& options() const { return options_; }

private:
    struct task {  // a micro-batch's way through the stages
        int stage = 0;
        bool backward = false;  // on the way back
        bool done = false;
        bool in_flight = false;
        int attempts = 0;
    };
    struct redo_task {  // a backward to run again in the collection
        bool in_flight = false;
        int attempts = 0;
    };
    struct work {  // an entry of the dispatch queue
        int microbatch = 0;
        int stage = 0;
        bool redo = false;
    };

    [[nodiscard]] bool is_backward(const work& w) const {
        return w.redo || tasks_[std::size_t(w.microbatch)].backward || is_last(w.stage);
    }
    // Work queued before a change of plan (its redo already done elsewhere) is skipped.
    [[nodiscard]] bool still_wanted(const work& w) const {
        if (w.redo) {
            const auto it = redo_.find({w.stage, w.microbatch});
            return phase_ == step_phase::collecting && it != redo_.end() && !it->second.in_flight;
        }
        const task& t = tasks_[std::size_t(w.microbatch)];
        return phase_ == step_phase::computing && !t.done && !t.in_flight && t.stage == w.stage;
    }

    // The stage a worker without a wish joins: the most loaded among those whose state it can
    // fetch (past step 0 and off a checkpoint, a stage whose workers all died has none).
    [[nodiscard]] int stage_to_join() const {
        // After a restart from a checkpoint, everyone is fetching state and no pool has a rate:
        // first a stage that no member is on its way to.
        for (int k = 0; restorable() && k < options_.stages; ++k) {
            bool anyone = false;
            for (const auto& [id, m] : members_) anyone = anyone || (m.live && m.stage == k);
            if (!anyone && has_state_to_fetch(k)) return k;
        }
        std::vector<stage_load> loads;
        std::vector<int> stage_of;
        for (int k = 0; k < options_.stages; ++k) {
            if (!has_state_to_fetch(k)) continue;
            loads.push_back(load_of(k));
            stage_of.push_back(k);
        }
        return loads.empty() ? 0 : stage_of[std::size_t(most_loaded_stage(loads))];
    }

    std::optional<worker_id> pick(int stage, call_class kind) {
        if (options_.routing == routing_rule::iwrr) return routers_[std::size_t(stage)].pick(kind);
        // In turn: the ready members of the stage after the last one picked.
        std::vector<worker_id> pool;
        for (const auto& [id, m] : members_)
            if (m.live && m.ready && !m.unreachable && m.stage == stage) pool.push_back(id);
        if (pool.empty()) return std::nullopt;
        auto& next = round_robin_next_[std::size_t(stage)];
        const worker_id chosen = pool[next++ % pool.size()];
        return chosen;
    }

    // Registers a call as awaited and gives it its id and time: its worker's own for its class
    // (a collect or an apply: for any call; a replayed step: the catch-up time), after the calls
    // its worker owes, which it serves first.
    call issue(call c) {
        member_state& m = members_.at(c.worker);
        c.id = next_call_++;
        const router& r = routers_[std::size_t(c.stage)];
        switch (c.kind) {
            case call_kind::forward:
                c.timeout_seconds = r.timeout_seconds(c.worker, call_class::forward);
                break;
            case call_kind::backward:
                c.timeout_seconds = r.timeout_seconds(c.worker, call_class::backward);
                break;
            case call_kind::collect:
            case call_kind::apply:
                c.timeout_seconds = r.timeout_seconds(c.worker);
                break;
            case call_kind::catch_up:
                c.timeout_seconds = options_.catch_up_timeout_seconds;
                break;
        }
        c.due_after_seconds = m.owed.due_after(c.timeout_seconds);
        m.owed.add(c.timeout_seconds);
        ++counts_.calls;
        pending_.emplace(c.id, c);
        return c;
    }

    void start_more() {
        const int cap = options_.max_in_flight > 0 ? options_.max_in_flight : options_.microbatches;
        while (started_ < options_.microbatches && started_ - finished_ < cap) queue_.push_back({started_++, 0, false});
    }
    // A stage gained a ready worker: what waited for one goes now.
    void wake(int stage) {
        auto& w = waiting_[std::size_t(stage)];
        for (const work& x : w) queue_.push_back(x);
        w.clear();
    }

    void forwarded(const call& c) {
        task& t = tasks_[std::size_t(c.microbatch)];
        t.in_flight = false;
        t.attempts = 0;
        t.stage = c.stage + 1;
        queue_.push_back({c.microbatch, t.stage, false});
    }
    void backed(const call& c) {
        task& t = tasks_[std::size_t(c.microbatch)];
        t.in_flight = false;
        t.attempts = 0;
        accepted_[{c.stage, c.microbatch}] = c.worker;
        uncollected_.insert({c.stage, c.microbatch});
        if (c.stage > 0) {
            t.stage = c.stage - 1;
            t.backward = true;
            queue_.push_back({c.microbatch, t.stage, false});
            return;
        }
        t.done = true;
        ++finished_;
        start_more();
        if (finished_ == options_.microbatches) {
            phase_ = step_phase::collecting;
            collect_plan_due_ = true;
        }
    }
    void redone(const call& c) {
        accepted_[{c.stage, c.microbatch}] = c.worker;
        redo_.erase({c.stage, c.microbatch});
        ++counts_.redone_backwards;
        collect_plan_due_ = true;
    }
    void collected(const call& c) {
        auto& done = collected_[std::size_t(c.stage)];
        for (const int mb : c.microbatches) {
            collecting_.erase({c.stage, mb});
            uncollected_.erase({c.stage, mb});
            require(done.insert(mb).second, "collected micro-batch", mb,
                    "was collected twice at stage " + std::to_string(c.stage));
        }
        for (const auto& s : collected_)
            if (s.size() != static_cast<std::size_t>(options_.microbatches)) return;
        phase_ = step_phase::summed;
    }
    void applied(const call& c, bool ok) {
        --applies_out_;
        member_state& m = members_.at(c.worker);
        if (ok) {
            m.step = step_ + 1;
            ++applied_[std::size_t(c.stage)];
        } else if (m.live) {
            if (m.ready) routers_[std::size_t(m.stage)].leave(c.worker);
            m.ready = false;
            lost_applies_.push_back(c.worker);
        }
        if (applies_out_ == 0) phase_ = step_phase::applied;
    }

    // A call that will not be answered: its work goes elsewhere.
    void lost(const call& c, const std::string& why) {
        switch (c.kind) {
            case call_kind::forward:
            case call_kind::backward: {
                ++counts_.retried_calls;
                int& attempts =
                    c.redo ? redo_.at({c.stage, c.microbatch}).attempts : tasks_[std::size_t(c.microbatch)].attempts;
                if (c.redo)
                    redo_.at({c.stage, c.microbatch}).in_flight = false;
                else
                    tasks_[std::size_t(c.microbatch)].in_flight = false;
                if (++attempts >= options_.max_attempts)
                    throw error(std::string(c.redo ? "the redone backward" : to_string(c.kind)) + " of micro-batch " +
                                std::to_string(c.microbatch) + " at stage " + std::to_string(c.stage) + " failed " +
                                std::to_string(attempts) + " times (the last: " + why +
                                "); the retry cap is --max-attempts " + std::to_string(options_.max_attempts));
                queue_.push_back({c.microbatch, c.stage, c.redo});
                return;
            }
            case call_kind::collect:
                ++counts_.retried_calls;
                for (const int mb : c.microbatches) {
                    collecting_.erase({c.stage, mb});
                    redo_[{c.stage, mb}];
                    queue_.push_back({mb, c.stage, true});
                }
                return;
            case call_kind::apply:
                applied(c, false);
                return;
            case call_kind::catch_up:
                caught_up(c.worker, false);
                return;
        }
    }
    // Every call `id` owed is lost at once (it died, or started over).
    void lose_calls_of(worker_id id, member_state& m) {
        m.catching_up = 0;
        m.owed.clear();
        std::vector<call> calls;
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second.worker == id) {
                calls.push_back(std::move(it->second));
                it = pending_.erase(it);
            } else {
                ++it;
            }
        }
        for (const call& c : calls)
            if (c.kind != call_kind::catch_up) lost(c, "worker " + std::to_string(id) + " died");
    }

    // The collection: each (stage, micro-batch) not collected yet is asked of the worker whose
    // backward counted, grouped by worker; one that cannot hand it over has it redone.
    void plan_collects() {
        collect_plan_due_ = false;
        std::map<std::pair<int, worker_id>, std::vector<std::int32_t>> groups;
        for (const auto& key : uncollected_) {
            const auto [k, mb] = key;
            if (collecting_.contains(key) || redo_.contains(key)) continue;
            const worker_id holder = accepted_.at(key);
            const member_state& m = members_.at(holder);
            if (!(m.live && m.ready && m.step == step_)) {  // gone, or moved on: its backward is redone
                redo_[key];
                queue_.push_back({mb, k, true});
                continue;
            }
            groups[{k, holder}].push_back(mb);
        }
        for (auto& [group, mbs] : groups) {
            for (const int mb : mbs) collecting_.insert({group.first, mb});
            outbox_.push_back(issue({.kind = call_kind::collect,
                                     .worker = group.second,
                                     .stage = group.first,
                                     .step = step_,
                                     .microbatches = std::move(mbs)}));
        }
    }

    // A worker holding an older step's state replays the kept steps it lacks, in order, and
    // joins its router once it holds the current step. One too far behind, or whose replay
    // fails, fetches its state again.
    void bring_up_to_date(worker_id id, member_state& m) {
        if (m.catching_up > 0) return;  // the answers bring it on
        if (m.step == step_) {
            if (!m.ready) {
                m.ready = true;
                if (!m.unreachable) {
                    routers_[std::size_t(m.stage)].join(id);
                    wake(m.stage);
                }
            }
            return;
        }
        if (m.ready) routers_[std::size_t(m.stage)].leave(id);
        m.ready = false;
        collect_plan_due_ = true;
        if (m.step > step_ || kept_.empty() || m.step < kept_.front()) {
            send_back(id, m);
            return;
        }
        m.catch_up_failed = false;
        for (const std::uint64_t s : kept_) {
            if (s < m.step) continue;
            outbox_.push_back(
                issue({.kind = call_kind::catch_up, .worker = id, .stage = m.stage, .step = s, .microbatches = {}}));
            ++m.catching_up;
        }
    }
    void caught_up(worker_id id, bool ok) {
        member_state& m = members_.at(id);
        --m.catching_up;
        if (ok)
            ++m.step;
        else
            m.catch_up_failed = true;
        if (m.catching_up > 0 || !m.live) return;
        if (m.catch_up_failed)
            send_back(id, m);
        else
            bring_up_to_date(id, m);
    }
    // The member fetches its stage's state again (on a move: the new stage's).
    void send_back(worker_id id, member_state& m) {
        collect_plan_due_ = true;  // what it held is redone
        if (m.ready) routers_[std::size_t(m.stage)].leave(id);
        m.ready = false;
        if (std::find(rejoins_.begin(), rejoins_.end(), id) == rejoins_.end()) rejoins_.push_back(id);
    }

    coordinator_options options_;
    std::vector<router> routers_;
    std::vector<std::size_t> round_robin_next_;
    std::map<worker_id, member_state> members_;
    std::map<std::uint64_t, call> pending_;
    std::uint64_t next_call_ = 1;
    std::uint64_t step_ = 0;
    step_phase phase_ = step_phase::between_steps;
    step_counts counts_;
    std::vector<call> outbox_;  // collects, applies, replays: made outside take_calls' queue
    std::vector<worker_id> rejoins_;
    std::deque<std::uint64_t> kept_;                // applied steps a behind worker may replay
    std::optional<std::uint64_t> restorable_step_;  // the step a checkpoint the driver serves holds
    // The step under way.
    std::vector<task> tasks_;
    int started_ = 0, finished_ = 0;
    std::deque<work> queue_;                             // forwards, backwards and redos to send
    std::vector<std::vector<work>> waiting_;             // per stage: work that found no live worker
    std::map<std::pair<int, int>, worker_id> accepted_;  // (stage, mb) -> whose backward counts
    std::vector<std::set<int>> collected_;               // per stage: micro-batches collected
    std::set<std::pair<int, int>> uncollected_;          // (stage, mb) accepted, not collected yet
    std::set<std::pair<int, int>> collecting_;           // (stage, mb) asked of a worker
    std::map<std::pair<int, int>, redo_task> redo_;      // (stage, mb) backwards to run again
    bool collect_plan_due_ = false;                      // something changed that the collection's plan must see
    std::vector<int> applied_;                           // per stage: workers that stepped
    int applies_out_ = 0;
    std::vector<worker_id> lost_applies_;
};

}  // namespace weft::swarm
