// Routing one SWARM stage's calls over its pool of workers (Ryabinin et al., ICML 2023,
// "stochastic wiring"): interleaved weighted round-robin.
//
// Each live worker has a virtual finish time. A call goes to the worker whose virtual time
// is least, ties broken at random, and that worker's virtual time then moves on by its
// expected time for that class of call (a forward or a backward, which differ several-fold):
// after a short trial (below), the exponential moving average (EMA) of the times its calls
// of the class were measured at. A worker twice as fast is thus chosen twice as often, and
// its calls interleave with the others' instead of coming in bursts. The times live in a
// min-heap; entries a worker left behind (it was chosen again, banned, or left) are skipped
// as they surface.
//
// A worker that joins enters at the current minimum, so it neither waits behind the pool
// nor takes a burst of calls to catch up. Its first calls of each class after each join are
// a trial: its expected time is the fastest of them, since a first call pays one-time costs
// (allocations, cold caches) and a loaded host can stretch any one call, but nothing makes a
// call faster than the worker is. The trial is per class: a forward is no measure of how long
// a backward takes. Until a class was timed since the join, the worker's estimate for it is
// its EMA over all of its calls (initial_seconds before any). A worker passed over for
// probe_after picks per live worker gets the next call whatever its estimate: an estimate is
// only corrected by calls, so without the probe one slow call could keep a worker idle for
// the rest of a run. A probed worker gets no other probe until that call is answered, and
// none after a timeout until a call of it is answered again, so a worker whose calls hang is
// not probed, and a truly slow one costs one call in probe_after x workers.
//
// A timed-out call multiplies the worker's estimates by a penalty (it is chosen less, and
// waited for longer); an error or a dead connection bans it until it announces itself again
// (join). Timeouts follow each worker's own estimate for the class of call: a multiple of
// it, never below a floor.
//
// The router is plain data with no clock or I/O, so that the real trainer and the simulated
// one (benchmarks/bench_swarm) make the same choices.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::swarm {

using worker_id = std::uint64_t;

// What a call was, for the timings a micro-batch's cost is reckoned from: a stage's
// micro-batch makes one forward call and one backward call (the last stage: one backward
// call that includes the forward). Their times differ several-fold, so one EMA of both
// would lean to whichever came last (at a step's end: all backwards).
enum class call_class : std::uint8_t { forward = 0, backward = 1 };

struct router_options {
    double ema_weight = 0.2;           // weight of the newest measurement in the EMA, in (0, 1]
    double initial_seconds = 1.0;      // the expected time of a worker not measured yet, > 0
    double timeout_multiple = 4.0;     // a call times out after this many EMAs, >= 1
    double timeout_floor_seconds = 1;  // and never sooner than this, > 0
    double timeout_penalty = 2.0;      // a timed-out worker's EMA is multiplied by this, >= 1
    int trial_calls = 2;               // a worker's estimate is the fastest of its first calls, >= 1
    int probe_after = 8;               // picks per live worker a worker may be passed over, >= 1
};

class router {
public:
    explicit router(int stage, router_options options = {}, std::uint64_t seed = 0)
        : stage_(stage), options_(options), random_(seed) {
        require(options.ema_weight > 0 && options.ema_weight <= 1, "ema_weight", options.ema_weight,
                "must be in (0, 1]");
        require(options.initial_seconds > 0, "initial_seconds", options.initial_seconds, "must be > 0");
        require(options.timeout_multiple >= 1, "timeout_multiple", options.timeout_multiple, "must be >= 1");
        require(options.timeout_floor_seconds > 0, "timeout_floor_seconds", options.timeout_floor_seconds,
                "must be > 0");
        require(options.timeout_penalty >= 1, "timeout_penalty", options.timeout_penalty, "must be >= 1");
        require(options.trial_calls >= 1, "trial_calls", options.trial_calls, "must be >= 1");
        require(options.probe_after >= 1, "probe_after", options.probe_after, "must be >= 1");
    }

    // A worker announces itself: it joins the pool (again, after a ban) at the current
    // minimum virtual time. A worker already live keeps its place.
    void join(worker_id id) {
        const double least = minimum_virtual_time();
        worker& w = entry_of(id);
        if (w.live) return;
        w.live = true;
        w.virtual_time = least;
        // A new trial: a worker back from a ban or a move may be a new process, or serve
        // another stage, and be cold again. Its estimate so far is the trial's starting guess.
        w.timed_calls = 0;
        w.class_calls = {};
        w.charged = {};
        w.last_pick = picks_;
        w.probe_held = false;
        push(id, w);
    }
    // A worker leaves (or moves to another stage): no more calls go to it.
    void leave(worker_id id) {
        if (auto it = workers_.find(id); it != workers_.end()) {
            it->second.live = false;
            ++it->second.version;
        }
    }

    // The worker the next call of class `kind` goes to; none when no worker is live.
    [[nodiscard]] std::optional<worker_id> pick(call_class kind = call_class::forward) {
        ++picks_;
        if (const auto id = passed_over_longest()) {
            // A probe: it is measured again, and goes on from the pool's present, as a joiner
            // does. No other probe goes to it until this call is answered, so that a slow
            // worker's calls do not pile up.
            worker& w = workers_.at(*id);
            w.probe_held = true;
            w.virtual_time = minimum_virtual_time() + charge(w, kind);
            w.last_pick = picks_;
            push(*id, w);
            return id;
        }
        while (!heap_.empty()) {
            const entry top = heap_.top();
            heap_.pop();
            worker& w = workers_.at(top.id);
            if (!w.live || top.version != w.version) continue;  // left behind
            w.virtual_time = top.finish + charge(w, kind);
            w.last_pick = picks_;
            push(top.id, w);
            return top.id;
        }
        return std::nullopt;
    }
    // As pick(), or a weft::error naming the stage when no worker is live.
    [[nodiscard]] worker_id pick_or_throw(call_class kind = call_class::forward) {
        if (const auto id = pick(kind)) return *id;
        throw error("swarm stage " + std::to_string(stage_) +
                    " has no live worker: every one has left, failed or been banned (start workers for it, or "
                    "wait for one to announce itself)");
    }

    // A call to `id` took `seconds`: its estimate follows, and that of its class of call.
    void finished(worker_id id, double seconds, call_class kind = call_class::forward) {
        require(seconds >= 0, "call seconds", seconds, "must be >= 0");
        worker& w = known(id);
        const auto c = static_cast<std::size_t>(kind);
        const bool on_trial = w.class_calls[c] < options_.trial_calls;
        // What its place was reckoned with: the charge of its latest pick of this class, or
        // (timed without a pick here) its estimate until now.
        const double charged = w.charged[c].value_or(expected(w, kind));
        w.class_seconds[c] = estimate_after(w.class_seconds[c], w.class_calls[c]++, seconds);
        w.ema_seconds = *estimate_after(w.ema_seconds, w.timed_calls++, seconds);
        w.measured = true;
        w.probe_held = false;  // answered: it may be probed again
        const double after = expected(w, kind);
        if (on_trial && w.live && after != charged) {
            // Its place was reckoned with an estimate the trial has corrected: the guess
            // (initial_seconds, or its calls of the other class), which may be ages of the
            // pool's calls, or a first call that paid one-time costs. Moved by the difference, it
            // gets its share from now on rather than after the pool catches up with the old
            // estimate.
            w.virtual_time += after - charged;
            w.charged[c] = after;
            push(id, w);
        }
    }
    // A call to `id` timed out: its estimates take the penalty; the caller tries another
    // worker. A timeout ends the trials of both classes, so a later fast call is blended into
    // the penalty rather than replacing it (a class not timed since the join starts from the
    // penalised EMA of all calls), and no probe goes to the worker until a call of it is
    // answered: its calls may hang.
    void timed_out(worker_id id) {
        worker& w = known(id);
        w.ema_seconds *= options_.timeout_penalty;
        w.measured = true;
        w.timed_calls = std::max(w.timed_calls, options_.trial_calls);
        for (std::size_t c = 0; c < w.class_seconds.size(); ++c) {
            w.class_seconds[c] = w.class_calls[c] > 0 ? *w.class_seconds[c] * options_.timeout_penalty : w.ema_seconds;
            w.class_calls[c] = std::max(w.class_calls[c], options_.trial_calls);
        }
        w.probe_held = true;
    }
    // A call to `id` failed, or its connection died: banned until it announces itself again.
    // A worker that dies before it ever joined (while fetching its state) is recorded banned.
    void failed(worker_id id) {
        worker& w = entry_of(id);
        w.live = false;
        ++w.version;
        ++w.bans;
    }

    // How long to wait for a call of class `kind` to `id`: a multiple of its estimate, never
    // below the floor. Without a class (a call the router does not route, such as a
    // step's collect): a multiple of its EMA over all calls.
    [[nodiscard]] double timeout_seconds(worker_id id, call_class kind) const {
        return timeout_after(expected(known(id), kind));
    }
    [[nodiscard]] double timeout_seconds(worker_id id) const { return timeout_after(known(id).ema_seconds); }
    // The EMA of all of `id`'s calls (initial_seconds before any was timed).
    [[nodiscard]] double expected_seconds(worker_id id) const { return known(id).ema_seconds; }
    // What a call of class `kind` to `id` is expected to take: the class's estimate, or the
    // EMA of all calls until the class was timed since the worker joined.
    [[nodiscard]] double expected_seconds(worker_id id, call_class kind) const { return expected(known(id), kind); }
    // The EMA of `id`'s calls of one class; none until one was timed (or timed out) since the
    // worker last joined: a worker back from a ban may be another process, on other hardware.
    [[nodiscard]] std::optional<double> class_seconds(worker_id id, call_class kind) const {
        const worker& w = known(id);
        const auto c = static_cast<std::size_t>(kind);
        return w.class_calls[c] > 0 ? w.class_seconds[c] : std::nullopt;
    }
    // Whether a call of `id` has been timed (or timed out) yet; until then its EMA is
    // initial_seconds.
    [[nodiscard]] bool is_measured(worker_id id) const {
        const auto it = workers_.find(id);
        return it != workers_.end() && it->second.measured;
    }
    [[nodiscard]] bool is_live(worker_id id) const {
        const auto it = workers_.find(id);
        return it != workers_.end() && it->second.live;
    }
    [[nodiscard]] int times_banned(worker_id id) const { return known(id).bans; }
    [[nodiscard]] std::size_t live_workers() const {
        std::size_t n = 0;
        for (const auto& [id, w] : workers_) n += w.live ? 1 : 0;
        return n;
    }
    [[nodiscard]] int stage() const { return stage_; }

private:
    struct worker {
        double ema_seconds = 0;  // set to initial_seconds when the entry is made (entry_of)
        double virtual_time = 0;
        std::uint64_t version = 0;  // heap entries of older versions are stale
        bool live = false;
        bool measured = false;
        int bans = 0;
        int timed_calls = 0;                                 // calls finished() since it joined, any class
        std::uint64_t last_pick = 0;                         // picks_ when it was last picked or joined
        bool probe_held = false;                             // a probe or a timeout, no call answered since
        std::array<std::optional<double>, 2> class_seconds;  // by call_class
        std::array<int, 2> class_calls{};                    // calls timed since it joined, by call_class
        std::array<std::optional<double>, 2> charged;        // what its latest pick of each class was charged
    };
    struct entry {
        double finish;
        std::uint64_t tie;  // random: equal times go in random order
        worker_id id;
        std::uint64_t version;
        friend bool operator>(const entry& a, const entry& b) {
            return a.finish != b.finish ? a.finish > b.finish : a.tie > b.tie;
        }
    };

    // The entry of `id`, made with the initial estimate if it has none. (A measured 0 s stays
    // 0 s: it is not mistaken for "not measured yet".)
    worker& entry_of(worker_id id) {
        const auto [it, made] = workers_.try_emplace(id);
        if (made) it->second.ema_seconds = options_.initial_seconds;
        return it->second;
    }
    // A class timed since the worker joined has an estimate of its own; one not timed yet (or
    // only before a ban: perhaps another process) follows the EMA of all of its calls.
    [[nodiscard]] static double expected(const worker& w, call_class kind) {
        const auto c = static_cast<std::size_t>(kind);
        return w.class_calls[c] > 0 ? w.class_seconds[c].value() : w.ema_seconds;
    }
    // What a pick of class `kind` moves the worker's virtual time on by; remembered, so that
    // the trial can correct it by the difference when the call is timed.
    static double charge(worker& w, call_class kind) {
        const double seconds = expected(w, kind);
        w.charged[static_cast<std::size_t>(kind)] = seconds;
        return seconds;
    }
    [[nodiscard]] double timeout_after(double expected_seconds) const {
        return std::max(options_.timeout_floor_seconds, options_.timeout_multiple * expected_seconds);
    }
    void push(worker_id id, worker& w) {
        ++w.version;
        heap_.push({w.virtual_time, random_(), id, w.version});
    }
    // An estimate after one more call of `seconds`, `calls_before` calls into its history:
    // the call itself at first, the fastest call during the trial, then the EMA.
    [[nodiscard]] std::optional<double> estimate_after(std::optional<double> estimate, int calls_before,
                                                       double seconds) const {
        if (!estimate || calls_before == 0) return seconds;
        if (calls_before < options_.trial_calls) return std::min(*estimate, seconds);
        return (1 - options_.ema_weight) * *estimate + options_.ema_weight * seconds;
    }
    // The live worker without a probe held that was picked longest ago, when that is more than
    // probe_after picks per live worker ago; none otherwise. One pass over the workers.
    [[nodiscard]] std::optional<worker_id> passed_over_longest() const {
        std::uint64_t live = 0;
        std::optional<worker_id> longest;
        std::uint64_t oldest_pick = picks_;
        for (const auto& [id, w] : workers_) {
            if (!w.live) continue;
            ++live;
            if (!w.probe_held && w.last_pick < oldest_pick) {
                longest = id;
                oldest_pick = w.last_pick;
            }
        }
        if (picks_ - oldest_pick > static_cast<std::uint64_t>(options_.probe_after) * live) return longest;
        return std::nullopt;
    }
    [[nodiscard]] double minimum_virtual_time() const {
        std::optional<double> least;
        for (const auto& [id, w] : workers_)
            if (w.live && (!least || w.virtual_time < *least)) least = w.virtual_time;
        return least.value_or(0.0);
    }
    [[nodiscard]] const worker& known(worker_id id) const {
        const auto it = workers_.find(id);
        if (it == workers_.end())
            throw invalid_argument("swarm worker", std::to_string(id), "has never joined stage " + std::to_string(stage_));
        return it->second;
    }
    worker& known(worker_id id) { return const_cast<worker&>(std::as_const(*this).known(id)); }

    int stage_;
    router_options options_;
    std::mt19937_64 random_;
    std::map<worker_id, worker> workers_;
    std::uint64_t picks_ = 0;  // pick() calls so far, the clock that probe_after counts on
    std::priority_queue<entry, std::vector<entry>, std::greater<>> heap_;
};

}  // namespace weft::swarm
