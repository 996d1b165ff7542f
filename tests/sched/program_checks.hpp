// Shared checks for the generator tests: shape and placement of a generated program,
// exactly-once work per (stage, micro-batch), validity before and after lowering, and a
// tiny unit-cost replay (bubble and peak activations) independent of sched/simulate.hpp.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "weft/sched/lower.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/validate.hpp"

namespace weft_test {

namespace ws = weft::sched;

// Sizes covered by the property loops: every m in [1, 64], as the issue asks (the loops
// also run every p in [1, 16] and v in {1, 2, 3, 4}).
inline std::vector<int> sampled_microbatches() {
    std::vector<int> out;
    for (int m = 1; m <= 64; ++m) out.push_back(m);
    return out;
}

enum class backward_form { full, split };

// Everything a generated program must satisfy. `rank_of(stage)` is the expected placement.
inline void check_program(const ws::program& p, int ranks, int microbatches, int chunks,
                          backward_form form, const std::function<int(int)>& rank_of) {
    using enum ws::action_kind;
    INFO("p = " << ranks << ", m = " << microbatches << ", v = " << chunks);
    REQUIRE(p.num_ranks == ranks);
    REQUIRE(p.num_stages == ranks * chunks);
    REQUIRE(p.num_microbatches == microbatches);
    REQUIRE_FALSE(p.lowered);
    REQUIRE(p.ranks.size() == static_cast<std::size_t>(ranks));
    bool placed = true;
    for (int s = 0; s < p.num_stages; ++s) placed = placed && p.stage_rank[static_cast<std::size_t>(s)] == rank_of(s);
    REQUIRE(placed);
    // Counted in a flat table and reported once: one Catch assertion per cell would
    // dominate the run time of the property loops.
    const auto cell = [&](ws::action_kind k, int s, int mb) {
        return (static_cast<std::size_t>(k) * static_cast<std::size_t>(p.num_stages) +
                static_cast<std::size_t>(s)) * static_cast<std::size_t>(microbatches) +
               static_cast<std::size_t>(mb);
    };
    std::vector<int> count(4 * static_cast<std::size_t>(p.num_stages) * static_cast<std::size_t>(microbatches), 0);
    std::string wrong;
    for (int r = 0; r < ranks && wrong.empty(); ++r)
        for (const ws::action& a : p.ranks[static_cast<std::size_t>(r)]) {
            if (a.kind != F && a.kind != B && a.kind != I && a.kind != W) {
                wrong = "unexpected " + ws::to_string(a);
                break;
            }
            if (a.stage < 0 || a.stage >= p.num_stages || a.microbatch < 0 || a.microbatch >= microbatches ||
                p.stage_rank[static_cast<std::size_t>(a.stage)] != r) {
                wrong = ws::to_string(a) + " out of range or on rank " + std::to_string(r);
                break;
            }
            ++count[cell(a.kind, a.stage, a.microbatch)];
        }
    for (int s = 0; s < p.num_stages && wrong.empty(); ++s)
        for (int mb = 0; mb < microbatches && wrong.empty(); ++mb) {
            const auto n = [&](ws::action_kind k) { return count[cell(k, s, mb)]; };
            const bool once = form == backward_form::full
                                  ? n(F) == 1 && n(B) == 1 && n(I) == 0 && n(W) == 0
                                  : n(F) == 1 && n(B) == 0 && n(I) == 1 && n(W) == 1;
            if (!once)
                wrong = "stage " + std::to_string(s) + ", microbatch " + std::to_string(mb) + ": F " +
                        std::to_string(n(F)) + ", B " + std::to_string(n(B)) + ", I " +
                        std::to_string(n(I)) + ", W " + std::to_string(n(W));
        }
    INFO(wrong);
    REQUIRE(wrong.empty());
    const ws::validation verdict = ws::check(p);
    INFO(verdict.message);
    REQUIRE(verdict.ok);
    const ws::program lowered = ws::lower(p);
    const ws::validation lowered_verdict = ws::check(lowered);
    INFO(lowered_verdict.message);
    REQUIRE(lowered_verdict.ok);
}

inline int own_rank(int stage) { return stage; }

// Replays a compute-only program with T_F = T_B(input) = T_W = 1 per rank share (a chunk
// costs 1/v, a full B 2/v) and no communication latency.
struct replay {
    double bubble = 0;               // longest per-rank span minus the busy time of a rank
    std::vector<double> peak;        // live activations per rank, in whole-rank micro-batches
};

inline replay unit_replay(const ws::program& p) {
    using enum ws::action_kind;
    const double v = static_cast<double>(p.num_stages) / p.num_ranks;
    std::map<std::tuple<int, int, int>, double> done;  // (kind, stage, mb) -> end time
    std::vector<std::size_t> next(static_cast<std::size_t>(p.num_ranks), 0);
    std::vector<double> clock(next.size(), 0), first(next.size(), -1), busy(next.size(), 0),
        live(next.size(), 0);
    replay out;
    out.peak.assign(next.size(), 0);
    const auto end_of = [&](ws::action_kind k, int s, int mb) -> double {
        const auto it = done.find({static_cast<int>(k), s, mb});
        return it == done.end() ? -1 : it->second;
    };
    const auto backward_end = [&](int s, int mb) {
        return std::max(end_of(B, s, mb), end_of(I, s, mb));
    };
    bool progress = true;
    while (progress) {
        progress = false;
        for (int r = 0; r < p.num_ranks; ++r) {
            const auto ru = static_cast<std::size_t>(r);
            const auto& actions = p.ranks[ru];
            while (next[ru] < actions.size()) {
                const ws::action a = actions[next[ru]];
                double ready = 0;
                if (a.kind == F && a.stage > 0) ready = end_of(F, a.stage - 1, a.microbatch);
                if (a.kind == B || a.kind == I) {
                    ready = end_of(F, a.stage, a.microbatch);
                    if (ready >= 0 && a.stage + 1 < p.num_stages) {
                        const double downstream = backward_end(a.stage + 1, a.microbatch);
                        ready = downstream < 0 ? -1 : std::max(ready, downstream);
                    }
                }
                if (a.kind == W) ready = end_of(I, a.stage, a.microbatch);
                if (ready < 0) break;
                const double cost = (a.kind == B ? 2.0 : 1.0) / v;
                const double start = std::max(clock[ru], ready);
                if (first[ru] < 0) first[ru] = start;
                clock[ru] = start + cost;
                busy[ru] += cost;
                done[{static_cast<int>(a.kind), a.stage, a.microbatch}] = clock[ru];
                if (a.kind == F) out.peak[ru] = std::max(out.peak[ru], live[ru] += 1 / v);
                if (a.kind == B || a.kind == W) live[ru] -= 1 / v;
                ++next[ru];
                progress = true;
            }
        }
    }
    double span = 0;
    for (std::size_t r = 0; r < next.size(); ++r) {
        REQUIRE(next[r] == p.ranks[r].size());
        span = std::max(span, clock[r] - first[r]);
    }
    out.bubble = span - busy[0];
    return out;
}

inline std::string text_of(const ws::program& p) { return ws::to_text(p); }

}  // namespace weft_test
