// zb-auto: the automatic zero-bubble schedule of Qi et al., "Zero Bubble Pipeline Parallelism"
// (ICLR 2024), Section 3.1's heuristic: greedy per-rank orders of F, I and W built against the
// costs and a limit on live activations, a few policy switches tried, the fastest kept.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/sched/zb_h2.hpp"

namespace weft::sched {

namespace detail {

// The switches the search tries; every combination is one candidate.
struct zb_auto_policy {
    // Before a rank's first backward: start a forward whenever one is ready, even if it may
    // delay that backward (false: only if it ends before the backward's input can arrive).
    bool eager_warmup = false;
    // The same choice in the steady state, after the first backward.
    bool eager_steady = false;
    // A W that does not fit a gap before the next input arrives: run it anyway (true) or only
    // when idling would make this rank's idle time the largest of all ranks (false).
    bool fill_partial_gaps = true;
    // Rank r holds at most memory_limit - r * staircase forwards whose W has not run (at least
    // one): 1 gives 1F1B's in-flight counts under a limit of p, 2 ZB-H2's under 2p - 1.
    int staircase = 0;
};

// Builds one candidate by list scheduling: the rank whose clock is earliest decides next, so
// every input that is not placed yet is known to arrive later than that clock. A backward that
// is ready runs first (it is on the critical path and lets W's free memory); a forward runs
// if the memory limit allows; gaps before an input arrives are filled with W's; a full memory
// is freed with W's.
class zb_auto_builder {
public:
    constexpr zb_auto_builder(const schedule_params& params, int memory_limit, zb_auto_policy policy)
        : p_(params.ranks),
          m_(params.microbatches),
          limits_(at(p_), memory_limit),
          comm_(params.costs.comm),
          policy_(policy),
          costs_(at(p_)),
          clock_(at(p_), 0.0),
          free_at_(at(p_), 0.0),
          idle_(at(p_), 0.0),
          forwards_(at(p_), 0),
          backwards_(at(p_), 0),
          weights_(at(p_), 0),
          forward_end_(at(p_ * m_), -1.0),
          backward_end_(at(p_ * m_), -1.0) {
        for (int r = 0; r < p_; ++r) {
            costs_[at(r)] = params.costs.of_rank(r);
            limits_[at(r)] = std::max(1, memory_limit - r * policy.staircase);
        }
        out_.num_ranks = p_;
        out_.num_stages = p_;
        out_.num_microbatches = m_;
        out_.stage_rank.resize(at(p_));
        out_.ranks.resize(at(p_));
        for (int r = 0; r < p_; ++r) {
            out_.stage_rank[at(r)] = r;
            out_.ranks[at(r)].reserve(3 * at(m_));
        }
    }

    [[nodiscard]] constexpr program build() {
        // The ranks with work left, earliest clock first and the lower rank first on a tie: the
        // order in which they get to decide. A rank that can only wait passes the decision on
        // to the next; one placement reorders only the rank that placed, so a decision costs
        // the ranks passed over plus one reinsertion, not a scan of all ranks per pass.
        std::vector<int> order;
        order.reserve(at(p_));
        for (int r = 0; r < p_; ++r)
            if (weights_done(r) < m_) order.push_back(r);
        while (!order.empty()) {
            std::size_t decided = order.size();
            for (std::size_t i = 0; i < order.size(); ++i)
                if (step(order[i])) {
                    decided = i;
                    break;
                }
            if (decided == order.size()) {
                // Every rank waits for another (each refuses a ready forward to keep its
                // backward on time); the earliest runs its forward anyway.
                const int forced = force_progress();
                decided = static_cast<std::size_t>(std::find(order.begin(), order.end(), forced) - order.begin());
                if (decided == order.size())
                    throw error("zb-auto: internal error: rank " + int_text(forced) + " moved but has no work left");
            }
            reorder(order, decided);
        }
        return out_;
    }

private:
    static constexpr double never = 1e300;

    static constexpr std::size_t at(int index) { return static_cast<std::size_t>(index); }

    // Moves the rank at order[index], whose clock changed, to its place by (clock, rank), or
    // drops it once its last W is placed.
    constexpr void reorder(std::vector<int>& order, std::size_t index) {
        const int r = order[index];
        order.erase(order.begin() + static_cast<std::ptrdiff_t>(index));
        if (weights_done(r) == m_) return;
        const auto earlier = [this](int a, int b) {
            return clock_[at(a)] < clock_[at(b)] || (clock_[at(a)] == clock_[at(b)] && a < b);
        };
        order.insert(std::lower_bound(order.begin(), order.end(), r, earlier), r);
    }
    constexpr int& forwards_done(int r) { return forwards_[at(r)]; }
    constexpr int& backwards_done(int r) { return backwards_[at(r)]; }
    constexpr int& weights_done(int r) { return weights_[at(r)]; }
    constexpr double& forward_end(int r, int mb) { return forward_end_[at(r * m_ + mb)]; }
    constexpr double& backward_end(int r, int mb) { return backward_end_[at(r * m_ + mb)]; }
    constexpr int live(int r) { return forwards_done(r) - weights_done(r); }

    [[nodiscard]] constexpr double cost(int r, action_kind kind) const {
        const rank_stage_cost& c = costs_[at(r)];
        if (kind == action_kind::F) return c.forward;
        if (kind == action_kind::I) return c.backward_input;
        return c.backward_weight;
    }

    // When the input of rank r's next forward arrives; `never` when it has none left or its
    // producer is not placed yet (then it arrives after the producer's rank clock).
    [[nodiscard]] constexpr double forward_input(int r) {
        if (forwards_done(r) == m_) return never;
        if (r == 0) return 0.0;
        const double produced = forward_end(r - 1, forwards_done(r));
        return produced < 0 ? never : produced + comm_;
    }
    [[nodiscard]] constexpr double backward_input(int r) {
        const int mb = backwards_done(r);
        if (mb == forwards_done(r)) return never;
        if (r + 1 == p_) return forward_end(r, mb);
        const double produced = backward_end(r + 1, mb);
        return produced < 0 ? never : std::max(forward_end(r, mb), produced + comm_);
    }
    // The earliest the backward's input could arrive, also when its producer is not placed.
    [[nodiscard]] constexpr double backward_input_bound(int r) {
        const double known = backward_input(r);
        if (known < never || backwards_done(r) == forwards_done(r)) return known;
        return clock_[at(r + 1)] + cost(r + 1, action_kind::I) + comm_;
    }

    constexpr void put(int r, action_kind kind) {
        int& count = kind == action_kind::F   ? forwards_done(r)
                     : kind == action_kind::I ? backwards_done(r)
                                              : weights_done(r);
        const double ready = kind == action_kind::F   ? forward_input(r)
                             : kind == action_kind::I ? backward_input(r)
                                                      : 0.0;
        const double start = std::max(free_at_[at(r)], ready);
        if (!out_.ranks[at(r)].empty()) {
            idle_[at(r)] += start - free_at_[at(r)];
            most_idle_ = std::max(most_idle_, idle_[at(r)]);
        }
        const double end = start + cost(r, kind);
        free_at_[at(r)] = end;
        clock_[at(r)] = end;
        if (kind == action_kind::F) forward_end(r, count) = end;
        if (kind == action_kind::I) backward_end(r, count) = end;
        out_.ranks[at(r)].push_back(action{kind, r, count});
        ++count;
    }

    // One decision for rank r at its clock: place an action, or move the clock to the next
    // known arrival. False when it can only wait for a producer that is not placed yet.
    constexpr bool step(int r) {
        const double now = clock_[at(r)];
        const double backward_at = backward_input(r);
        if (backward_at <= now) {
            put(r, action_kind::I);
            return true;
        }
        const bool room = live(r) < limits_[at(r)];
        const double forward_at = forward_input(r);
        if (forward_at <= now) {
            if (!room) {
                if (weights_done(r) < backwards_done(r)) {
                    put(r, action_kind::W);
                    return true;
                }
            } else {
                const bool eager =
                    backwards_done(r) == 0 ? policy_.eager_warmup : policy_.eager_steady;
                if (eager || now + cost(r, action_kind::F) <= backward_input_bound(r)) {
                    put(r, action_kind::F);
                    return true;
                }
            }
        }
        // A forward that is ready but held back for the backward does not end the wait.
        const double next = std::min(backward_at, room && forward_at > now ? forward_at : never);
        if (weights_done(r) < backwards_done(r)) {
            const double gap = std::min(next, backward_input_bound(r)) - now;
            if (gap >= cost(r, action_kind::W) || policy_.fill_partial_gaps ||
                idle_[at(r)] + gap > most_idle_) {
                put(r, action_kind::W);
                return true;
            }
        }
        if (next < never) {
            clock_[at(r)] = std::max(now, next);
            return true;
        }
        return false;
    }

    // Places a forward on the earliest rank that has one ready and room for it; returns that rank.
    constexpr int force_progress() {
        int chosen = -1;
        for (int r = 0; r < p_; ++r)
            if (forward_input(r) < never && live(r) < limits_[at(r)] &&
                (chosen < 0 || clock_[at(r)] < clock_[at(chosen)]))
                chosen = r;
        if (chosen < 0) throw error("zb-auto: internal error: no rank can make progress");
        put(chosen, action_kind::F);
        return chosen;
    }

    int p_;
    int m_;
    std::vector<int> limits_;  // per rank: the memory limit with the staircase applied
    double comm_;
    zb_auto_policy policy_;
    std::vector<rank_stage_cost> costs_;
    std::vector<double> clock_;    // per rank: the time its next decision is made at
    std::vector<double> free_at_;  // per rank: when its last placed action ends
    std::vector<double> idle_;     // per rank: time waited since its first action
    double most_idle_ = 0;         // the largest of idle_ (idle times only grow)
    std::vector<int> forwards_;    // per rank: F, I and W placed so far
    std::vector<int> backwards_;
    std::vector<int> weights_;
    std::vector<double> forward_end_;   // per (rank, micro-batch); -1 while not placed
    std::vector<double> backward_end_;  // I's end, likewise
    program out_;
};

}  // namespace detail

struct zb_auto {
    static constexpr schedule_kind::description description{
        .name = "zb-auto", .chunks = detail::one_stage_per_rank};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // params.costs gives T_F, T_B, T_W (per rank) and T_comm; params.memory_limit caps the live
    // activations per rank in micro-batches (0 = p). Needs chunks == 1 and memory_limit >= 1
    // (or 0). Of the candidates (24 heuristic ones, and ZB-H1 / ZB-H2 where they fit), the
    // one with the smallest cost is returned: the longest span (first start to last end) of
    // any rank, the objective of the paper's ILP and the cost of its bubble rate. Makespan
    // breaks ties (a candidate equal in both keeps the earlier one). Ranking by makespan
    // alone would count the pipeline's fill time, which no order can remove, and let a
    // candidate with a worse bubble win a tie.
    //
    // Memory is counted as simulate() does: a micro-batch is live from its F until its W (the
    // paper counts M_B until B and a smaller M_W until W), so a limit of p is 1F1B's peak.
    // It bounds the bubble: the last rank can defer at most L of its W's past its last I,
    // and those must cover the backward trip to rank 0, so under a limit L (uniform costs)
    //     cost >= m (T_F + T_B + T_W) + (p-1)(T_F + T_B + 2 T_comm) - (L-1) T_W.
    // With the paper's Table 6 costs and L = 2p this search reaches that bound on every
    // row; the paper's lower ZB-2p bubbles need about 3p-4p live micro-batches counted so.
    //
    // Bounded: one candidate makes 3pm decisions; each may pass over up to p ranks that wait
    // on one another before one places, so the search is O(24 p^2 m) with the simulations of
    // the candidates (32 ranks x 512 micro-batches under a limit of p: about 0.6 s on a
    // 2-core machine, 1.7 to 2.8 s in the same runs before the ranks were kept in clock order
    // and the candidates went unchecked). The size bound stays where it was, so a layout gets
    // the same program as before: beyond max_search_size (p^3 m) it does not search and
    // returns ZB-H2 when it fits the limit (else ZB-H1): the schedules the search is seeded
    // with, and at that size the bubble they leave (p-1 idle slots over m) is small. The bound
    // is a size, not a time, so that every rank of a job, whatever its speed, lowers the same
    // program.
    static constexpr double max_search_size = 16777216.0;  // 2^24 = 32^3 * 512

    [[nodiscard]] static constexpr double search_size(const schedule_params& params) {
        const double p = params.ranks;
        return p * p * p * static_cast<double>(params.microbatches);
    }
    // Whether generate() searches (true) or falls back to a handcrafted schedule (false).
    [[nodiscard]] static constexpr bool searches(const schedule_params& params) {
        return search_size(params) <= max_search_size;
    }
    // The handcrafted schedule generate() returns when it does not search: zb-h2 where the
    // limit and m reach 2p - 1, else zb-h1 where they reach p, else none (generate() throws).
    [[nodiscard]] static constexpr std::string_view fallback_name(const schedule_params& params) {
        const int p = params.ranks;
        const int m = params.microbatches;
        const int limit = params.memory_limit == 0 ? p : params.memory_limit;
        if (limit >= 2 * p - 1 && m >= 2 * p - 1) return zb_h2::name;
        if (limit >= p && m >= p) return zb_h1::name;
        return {};
    }

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        if (params.memory_limit < 0)
            throw invalid_argument("memory_limit", params.memory_limit,
                                   "must be >= 1 micro-batch, or 0 for the default (ranks)");
        params.costs.validate(params.ranks);
        const int limit = params.memory_limit == 0 ? params.ranks : params.memory_limit;
        if (!searches(params)) return fallback(params);

        program best;
        double best_cost = 0;
        double best_makespan = 0;
        // The candidates are timed without simulate()'s check(): each is valid by construction,
        // and checking 26 of them was a fifth of the search. The one returned is checked below.
        const auto consider = [&](const program& candidate) {
            const simulation timed = detail::timed_simulator(candidate, params.costs).run();
            double cost = 0;
            for (const double span : timed.span) cost = cost < span ? span : cost;
            // Relative tolerance: costs are sums of doubles, equal schedules may differ in the last bits.
            const double tolerance = 1e-9 * (best_cost > 0 ? best_cost : 1);
            const bool cheaper = cost < best_cost - tolerance;
            const bool tie = !cheaper && cost <= best_cost + tolerance;
            if (best.ranks.empty() || cheaper || (tie && timed.makespan < best_makespan - tolerance)) {
                best = candidate;
                best_cost = cost;
                best_makespan = timed.makespan;
            }
        };
        for (int choice = 0; choice < 24; ++choice) {
            const detail::zb_auto_policy policy{(choice & 1) != 0, (choice & 2) != 0,
                                                (choice & 4) == 0, choice / 8};
            consider(detail::zb_auto_builder(params, limit, policy).build());
        }
        // The handcrafted schedules seed the search where they fit the limit (peaks p and
        // 2p - 1), so the result is never slower than them under the given costs.
        const int p = params.ranks;
        const int m = params.microbatches;
        if (limit >= p && m >= p) consider(zb_h1::generate(params));
        if (limit >= 2 * p - 1 && m >= 2 * p - 1) consider(zb_h2::generate(params));
        if (const validation v = check(best); !v.ok)
            throw error("zb-auto: internal error: the chosen program is invalid: " + v.message);
        return best;
    }

private:
    [[nodiscard]] static constexpr program fallback(const schedule_params& params) {
        const std::string_view chosen = fallback_name(params);
        if (chosen == zb_h2::name) return zb_h2::generate(params);
        if (chosen == zb_h1::name) return zb_h1::generate(params);
        const int limit = params.memory_limit == 0 ? params.ranks : params.memory_limit;
        throw invalid_argument(
            "microbatches", params.microbatches,
            "zb-auto does not search beyond ranks^3 x micro-batches = 2^24 (ranks = " + detail::int_text(params.ranks) +
                "), and its fallbacks need micro-batches >= ranks and a memory_limit >= ranks (zb-h1), or "
                "both >= 2 ranks - 1 (zb-h2); memory_limit is " + detail::int_text(limit) +
                ": raise both, or use fewer ranks or micro-batches");
    }
};

}  // namespace weft::sched
