// Timed discrete-event simulation of a pipeline program: from per-action costs it derives when
// every action starts and ends on its rank, the makespan, the bubble rate and the peak of live
// activations per rank. Works on compute-only and lowered programs alike (same timings).
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/validate.hpp"

namespace weft::sched {

struct timed_action {
    action what;
    int rank = 0;
    double start = 0;
    double end = 0;
    friend constexpr bool operator==(const timed_action&, const timed_action&) = default;
};

struct simulation {
    double makespan = 0;     // max end over all ranks (time starts at 0)
    double bubble_rate = 0;  // (cost - busy) / cost of the rank with the longest span
    // Per rank, in micro-batches of the rank's whole share (a chunk's micro-batch counts 1/v):
    // an activation is live from its F until its B, or until its W when the backward is split.
    std::vector<double> peak_activations;
    std::vector<double> busy;  // per rank: total compute time
    std::vector<double> span;  // per rank: last compute end - first compute start (0 if none)
    std::vector<std::vector<timed_action>> timeline;  // per rank, in program order, every action
};

namespace detail {

// Per (kind F .. RECV_B, stage, micro-batch): when that action ended, or -1 while not run yet.
class finish_times : public action_table<double> {
public:
    constexpr finish_times(int stages, int microbatches) : action_table<double>(stages, microbatches, -1.0) {}
};

class timed_simulator {
public:
    constexpr timed_simulator(const program& p, const cost_model& costs)
        : p_(p),
          costs_(costs),
          chunks_(static_cast<double>(p.num_stages) / static_cast<double>(p.num_ranks)),
          done_(p.num_stages, p.num_microbatches),
          weight_grads_(static_cast<std::size_t>(p.num_stages), 0),
          last_weight_grad_(static_cast<std::size_t>(p.num_stages), 0.0),
          next_(static_cast<std::size_t>(p.num_ranks), 0),
          free_at_(static_cast<std::size_t>(p.num_ranks), 0.0),
          live_(static_cast<std::size_t>(p.num_ranks), 0),
          peak_(static_cast<std::size_t>(p.num_ranks), 0),
          first_start_(static_cast<std::size_t>(p.num_ranks), -1.0),
          last_end_(static_cast<std::size_t>(p.num_ranks), 0.0) {}

    [[nodiscard]] constexpr sched::simulation run() {
        const auto ranks = static_cast<std::size_t>(p_.num_ranks);
        sched::simulation out;
        out.peak_activations.assign(ranks, 0.0);
        out.busy.assign(ranks, 0.0);
        out.span.assign(ranks, 0.0);
        out.timeline.resize(ranks);
        for (std::size_t r = 0; r < ranks; ++r) out.timeline[r].reserve(p_.ranks[r].size());

        bool progress = true;
        while (progress) {
            progress = false;
            for (int r = 0; r < p_.num_ranks; ++r) {
                const auto ri = static_cast<std::size_t>(r);
                const auto& actions = p_.ranks[ri];
                while (next_[ri] < actions.size()) {
                    const action& a = actions[next_[ri]];
                    const std::optional<double> ready = inputs_ready(r, a);
                    if (!ready) break;
                    const double start = std::max(free_at_[ri], *ready);
                    const double duration = cost_of(r, a);
                    const double end = start + duration;
                    free_at_[ri] = end;
                    record(r, a, end);
                    if (is_compute(a.kind)) {
                        out.busy[ri] += duration;
                        if (first_start_[ri] < 0) first_start_[ri] = start;
                        last_end_[ri] = end;
                    }
                    out.timeline[ri].push_back(timed_action{a, r, start, end});
                    out.makespan = std::max(out.makespan, end);
                    ++next_[ri];
                    progress = true;
                }
            }
        }
        for (std::size_t r = 0; r < ranks; ++r)
            if (next_[r] != p_.ranks[r].size())
                // check() found no deadlock under the same dependencies, so this is a bug here.
                throw error("simulate: internal error: rank " +
                            int_text(static_cast<long long>(r)) + " stalled at index " +
                            int_text(static_cast<long long>(next_[r])));

        std::size_t longest = 0;
        for (std::size_t r = 0; r < ranks; ++r) {
            out.span[r] = first_start_[r] < 0 ? 0.0 : last_end_[r] - first_start_[r];
            out.peak_activations[r] = static_cast<double>(peak_[r]) / chunks_;
            // The first rank wins ties, so the result does not depend on rounding order.
            if (out.span[r] > out.span[longest]) longest = r;
        }
        const double cost = out.span[longest];
        out.bubble_rate = cost > 0 ? (cost - out.busy[longest]) / cost : 0.0;
        return out;
    }

private:
    [[nodiscard]] constexpr int rank_of(int stage) const {
        return p_.stage_rank[static_cast<std::size_t>(stage)];
    }

    // When the backward of (stage, mb) ended, whichever form (B or I) the program uses.
    [[nodiscard]] constexpr double backward_end(int stage, int microbatch) const {
        const double b = done_(action_kind::B, stage, microbatch);
        return b >= 0 ? b : done_(action_kind::I, stage, microbatch);
    }

    // The time a value produced at `produced` (on stage `from`) reaches rank `r`.
    [[nodiscard]] constexpr std::optional<double> arrival(double produced, int from, int r) const {
        if (produced < 0) return std::nullopt;
        return rank_of(from) == r ? produced : produced + costs_.comm;
    }

    [[nodiscard]] static constexpr std::optional<double> later(std::optional<double> a,
                                                               std::optional<double> b) {
        if (!a || !b) return std::nullopt;
        return std::max(*a, *b);
    }

    // When everything `a` consumes is available on rank `r`; none while a producer has not run.
    [[nodiscard]] constexpr std::optional<double> inputs_ready(int r, const action& a) const {
        using enum action_kind;
        const int s = a.stage;
        const int mb = a.microbatch;
        const auto known = [](double t) -> std::optional<double> {
            if (t < 0) return std::nullopt;
            return t;
        };
        switch (a.kind) {
            case F:
                if (s == 0) return 0.0;
                // In a lowered program a remote input arrives through this rank's RECV_F.
                if (p_.lowered && rank_of(s - 1) != r) return known(done_(RECV_F, s, mb));
                return arrival(done_(F, s - 1, mb), s - 1, r);
            case B:
            case I: {
                const std::optional<double> forward = known(done_(F, s, mb));
                if (s + 1 == p_.num_stages) return forward;
                if (p_.lowered && rank_of(s + 1) != r)
                    return later(forward, known(done_(RECV_B, s, mb)));
                return later(forward, arrival(backward_end(s + 1, mb), s + 1, r));
            }
            case W: return known(done_(I, s, mb));
            case SEND_F: return known(done_(F, s, mb));
            case SEND_B: return known(backward_end(s, mb));
            case RECV_F: {
                const double sent = done_(SEND_F, s - 1, mb);
                if (sent < 0) return std::nullopt;
                return sent + costs_.comm;
            }
            case RECV_B: {
                const double sent = done_(SEND_B, s + 1, mb);
                if (sent < 0) return std::nullopt;
                return sent + costs_.comm;
            }
            case REDUCE_GRAD:
                if (weight_grads_[static_cast<std::size_t>(s)] < p_.num_microbatches)
                    return std::nullopt;
                return last_weight_grad_[static_cast<std::size_t>(s)];
            case OVERLAP_F_B:
                return later(inputs_ready(r, forward_part(a)), inputs_ready(r, backward_part(a)));
            default: return 0.0;
        }
    }

    [[nodiscard]] constexpr double cost_of(int r, const action& a) const {
        using enum action_kind;
        if (!is_compute(a.kind)) return 0.0;
        const rank_stage_cost c = costs_.of_rank(r);
        switch (a.kind) {
            case F: return c.forward / chunks_;
            case B: return (c.backward_input + c.backward_weight) / chunks_;
            case I: return c.backward_input / chunks_;
            case W: return c.backward_weight / chunks_;
            case OVERLAP_F_B: return cost_of(r, forward_part(a)) + cost_of(r, backward_part(a));
            default: return 0.0;
        }
    }

    constexpr void record(int r, const action& a, double end) {
        using enum action_kind;
        const auto ri = static_cast<std::size_t>(r);
        if (a.kind == OVERLAP_F_B) {
            // The pair runs as one unit: neither output is available before both finished.
            record(r, forward_part(a), end);
            record(r, backward_part(a), end);
            return;
        }
        if (is_tracked(a.kind)) done_(a.kind, a.stage, a.microbatch) = end;
        if (a.kind == F) {
            ++live_[ri];
            peak_[ri] = std::max(peak_[ri], live_[ri]);
        }
        if (a.kind == B || a.kind == W) {
            --live_[ri];
            auto& count = weight_grads_[static_cast<std::size_t>(a.stage)];
            ++count;
            auto& last = last_weight_grad_[static_cast<std::size_t>(a.stage)];
            last = std::max(last, end);
        }
    }

    const program& p_;
    const cost_model& costs_;
    double chunks_;  // v: stages per rank; a chunk costs 1/v of its rank's share
    finish_times done_;
    std::vector<int> weight_grads_;         // per stage: B or W actions run
    std::vector<double> last_weight_grad_;  // per stage: when the last of them ended
    std::vector<std::size_t> next_;         // per rank: index of the next action
    std::vector<double> free_at_;           // per rank: when its previous action ended
    std::vector<int> live_;                 // per rank: live activations, in chunk micro-batches
    std::vector<int> peak_;
    std::vector<double> first_start_;  // per rank: first compute start, -1 before any
    std::vector<double> last_end_;
};

}  // namespace detail

// Each rank runs its actions in program order; an action starts when the rank is free and its
// inputs are ready. A chunk's F costs T_F / v, I T_B / v, W T_W / v, B (T_B + T_W) / v and an
// OVERLAP_F_B the sum of its parts, v = num_stages / num_ranks, with the costs of the rank
// that runs it. SEND and RECV take no compute time; data sent at t arrives at t + T_comm, and a
// RECV holds its rank until the data arrived. In a compute-only program an input from another
// rank arrives at the producer's end + T_comm, from the same rank at the producer's end; so a
// program and lower() of it have the same timings. Throws weft::error for an invalid program
// (with check()'s message) or invalid costs.
[[nodiscard]] constexpr simulation simulate(const program& p, const cost_model& costs = {}) {
    if (const validation v = check(p); !v.ok)
        throw error("simulate: the program is invalid: " + v.message);
    costs.validate(p.num_ranks);
    return detail::timed_simulator(p, costs).run();
}

}  // namespace weft::sched
