// Checks that a program is a correct pipeline schedule: consistent sizes, every
// (stage, micro-batch) computed exactly once in a legal order, matched SEND/RECV pairs,
// and no deadlock under the engine's semantics (found by simulating the ranks).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "weft/sched/action.hpp"
#include "weft/sched/detail/action_table.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched {

struct validation {
    bool ok = true;
    std::string message;  // what is wrong and where (rank, index, action text); empty when ok
};

namespace detail {

[[nodiscard]] constexpr std::string where(int rank, std::size_t index, const action& a) {
    return "rank " + int_text(rank) + ", index " + int_text(static_cast<long long>(index)) +
           " (" + to_string(a) + ")";
}

// Per (kind, stage, micro-batch): the index of that action on its rank (its rank is always
// stage_rank[stage]), or -1 while absent.
using position_table = action_table<int>;

// Takes a reference and copies: GCC 12 rejects moving a heap-allocated std::string
// during constant evaluation ("accessing _M_allocated_capacity member instead of ...").
[[nodiscard]] constexpr validation failure(const std::string& message) {
    return validation{false, message};
}

[[nodiscard]] constexpr validation check_sizes(const program& p) {
    if (p.num_ranks < 1)
        return failure("num_ranks = " + int_text(p.num_ranks) + " is invalid: must be >= 1");
    if (p.num_stages < 1)
        return failure("num_stages = " + int_text(p.num_stages) + " is invalid: must be >= 1");
    if (p.num_microbatches < 1)
        return failure("num_microbatches = " + int_text(p.num_microbatches) +
                       " is invalid: must be >= 1");
    if (p.ranks.size() != static_cast<std::size_t>(p.num_ranks))
        return failure("ranks.size() = " + int_text(static_cast<long long>(p.ranks.size())) +
                       " is invalid: must equal num_ranks = " + int_text(p.num_ranks));
    if (p.stage_rank.size() != static_cast<std::size_t>(p.num_stages))
        return failure("stage_rank.size() = " +
                       int_text(static_cast<long long>(p.stage_rank.size())) +
                       " is invalid: must equal num_stages = " + int_text(p.num_stages));
    for (int s = 0; s < p.num_stages; ++s) {
        const int r = p.stage_rank[static_cast<std::size_t>(s)];
        if (r < 0 || r >= p.num_ranks)
            return failure("stage_rank[" + int_text(s) + "] = " + int_text(r) +
                           " is invalid: must be in [0, " + int_text(p.num_ranks) + ")");
    }
    // Every (stage, micro-batch) needs at least an F and a backward. Rejecting programs
    // with fewer actions than pairs bounds the tables below by the program's own size, so
    // a huge num_microbatches cannot exhaust memory; the later checks name what is missing.
    long long total = 0;
    for (const auto& actions : p.ranks) total += static_cast<long long>(actions.size());
    const long long needed = 2LL * p.num_stages * p.num_microbatches;
    if (total < needed / 2)
        return failure("the program has " + int_text(total) + " actions but num_stages = " +
                       int_text(p.num_stages) + " and num_microbatches = " +
                       int_text(p.num_microbatches) + " need at least " + int_text(needed) +
                       " (an F and a backward for every stage and micro-batch)");
    return {};
}

// The neighbour a comm action talks to, or -1 when the action has none (an edge stage).
[[nodiscard]] constexpr int comm_peer_stage(const action& a, int num_stages) {
    int peer = -1;
    switch (a.kind) {
        case action_kind::SEND_F: peer = a.stage + 1; break;
        case action_kind::RECV_F: peer = a.stage - 1; break;
        case action_kind::SEND_B: peer = a.stage - 1; break;
        case action_kind::RECV_B: peer = a.stage + 1; break;
        default: break;
    }
    return peer >= 0 && peer < num_stages ? peer : -1;
}

// Rejects a compute or comm action (never an OVERLAP_F_B itself) that cannot be right
// wherever it stands, and records its index in `position`. `whole` is the action as the
// program holds it (for an overlap's part, the whole overlap), named in messages; they are
// only built on failure, since check() runs on every generated program.
[[nodiscard]] constexpr validation check_action(const program& p, position_table& position, int r,
                                                std::size_t i, const action& a,
                                                const action& whole) {
    const auto at = [&] { return where(r, i, whole); };
    if (a.stage < 0 || a.stage >= p.num_stages)
        return failure(at() + ": stage " + int_text(a.stage) + " is out of range [0, " +
                       int_text(p.num_stages) + ")");
    if (has_microbatch(a.kind)) {
        if (a.microbatch < 0 || a.microbatch >= p.num_microbatches)
            return failure(at() + ": microbatch " + int_text(a.microbatch) +
                           " is out of range [0, " + int_text(p.num_microbatches) + ")");
    } else if (a.microbatch != -1) {
        return failure(at() + ": " + std::string(to_string(a.kind)) +
                       " takes no microbatch, but it is " + int_text(a.microbatch));
    }
    const int owner = p.stage_rank[static_cast<std::size_t>(a.stage)];
    if (owner != r)
        return failure(at() + ": stage " + int_text(a.stage) + " runs on rank " + int_text(owner) +
                       ", not on rank " + int_text(r));
    if (is_comm(a.kind)) {
        if (!p.lowered)
            return failure(at() + ": a program that is not lowered (lowered = false) "
                                "must not contain SEND/RECV actions");
        const int peer = comm_peer_stage(a, p.num_stages);
        if (peer < 0)
            return failure(at() + ": stage " + int_text(a.stage) +
                           " has no neighbour to talk to in that direction");
        if (p.stage_rank[static_cast<std::size_t>(peer)] == r)
            return failure(at() + ": its peer stage " + int_text(peer) +
                           " runs on the same rank, which needs no communication");
    }
    if (is_tracked(a.kind)) {
        int& slot = position(a.kind, a.stage, a.microbatch);
        if (slot >= 0)
            return failure(at() + ": duplicate of index " + int_text(slot) + " on the same rank" +
                           (a.kind == action_kind::F || a.kind == action_kind::B ||
                                    a.kind == action_kind::I
                                ? " (" + to_string(a) + ")"
                                : std::string()));
        slot = static_cast<int>(i);
    }
    return {};
}

// Fills `position` and rejects actions that cannot be right wherever they stand. Both
// parts of an OVERLAP_F_B get the overlap's index: the F counts as just before the
// backward, and SENDs/RECVs around the overlap serve either part.
[[nodiscard]] constexpr validation check_actions(const program& p, position_table& position) {
    for (int r = 0; r < p.num_ranks; ++r) {
        const auto& actions = p.ranks[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < actions.size(); ++i) {
            const action& a = actions[i];
            if (!is_known(a.kind))
                return failure("rank " + int_text(r) + ", index " +
                               int_text(static_cast<long long>(i)) + ": action kind " +
                               int_text(static_cast<int>(a.kind)) + " is not an action_kind");
            const auto at = [&] { return where(r, i, a); };
            if (a.kind != action_kind::OVERLAP_F_B) {
                if (a.overlap_stage != -1 || a.overlap_microbatch != -1 ||
                    a.overlap_backward_kind != action_kind::B)
                    return failure(at() + ": only an OVERLAP_F_B sets the overlap_* fields");
                if (validation v = check_action(p, position, r, i, a, a); !v.ok) return v;
                continue;
            }
            if (a.overlap_backward_kind != action_kind::B && a.overlap_backward_kind != action_kind::I)
                return failure(at() + ": the backward part of an OVERLAP_F_B must be a B or an I, not " +
                               std::string(to_string(a.overlap_backward_kind)));
            if (validation v = check_action(p, position, r, i, forward_part(a), a); !v.ok) return v;
            if (validation v = check_action(p, position, r, i, backward_part(a), a); !v.ok)
                return v;
        }
    }
    return {};
}

[[nodiscard]] constexpr std::string action_text(action_kind kind, int stage, int microbatch) {
    return to_string(action{kind, stage, microbatch});
}

// Completeness and the orders that are fixed within one rank.
[[nodiscard]] constexpr validation check_stage_work(const program& p, const position_table& position) {
    using enum action_kind;
    for (int s = 0; s < p.num_stages; ++s) {
        const int r = p.stage_rank[static_cast<std::size_t>(s)];
        const auto on_rank = [&] { return " on rank " + int_text(r); };
        for (int mb = 0; mb < p.num_microbatches; ++mb) {
            const int f = position(F, s, mb);
            const int b = position(B, s, mb);
            const int i = position(I, s, mb);
            const int w = position(W, s, mb);
            if (f < 0) return failure("missing " + action_text(F, s, mb) + on_rank());
            if (b >= 0 && (i >= 0 || w >= 0))
                return failure("both " + action_text(B, s, mb) + " and " +
                               action_text(i >= 0 ? I : W, s, mb) + on_rank() +
                               ": a backward is either B or I plus W");
            if (b < 0 && i < 0)
                return failure("missing backward " + action_text(B, s, mb) + " (or " +
                               action_text(I, s, mb) + " plus " + action_text(W, s, mb) + ")" +
                               on_rank());
            if (i >= 0 && w < 0)
                return failure("missing " + action_text(W, s, mb) + " after " +
                               action_text(I, s, mb) + on_rank());
            const int backward = b >= 0 ? b : i;
            const action_kind backward_kind = b >= 0 ? B : I;
            if (backward < f)
                // Names the action as the program holds it (an overlap shows both parts).
                return failure(where(r, static_cast<std::size_t>(backward),
                                     p.ranks[static_cast<std::size_t>(r)]
                                            [static_cast<std::size_t>(backward)]) +
                               " comes before its forward " + action_text(F, s, mb) +
                               " at index " + int_text(f));
            if (w >= 0 && w < i)
                return failure(where(r, static_cast<std::size_t>(w), {W, s, mb}) +
                               " comes before " + action_text(I, s, mb) + " at index " +
                               int_text(i));
            if (!p.lowered) continue;
            // SENDs ship what was just computed; RECVs must land before it is consumed.
            // Messages are built only on failure: this runs for every (stage, micro-batch).
            const auto after = [&](action_kind kind, int producer,
                                   action_kind produced) -> validation {
                const int at = position(kind, s, mb);
                if (at >= 0 && at < producer)
                    return failure(where(r, static_cast<std::size_t>(at), {kind, s, mb}) +
                                   " comes before " + action_text(produced, s, mb) +
                                   " at index " + int_text(producer));
                return {};
            };
            const auto before = [&](action_kind kind, int consumer,
                                    action_kind consumed) -> validation {
                const int at = position(kind, s, mb);
                if (at >= 0 && at > consumer)
                    return failure(where(r, static_cast<std::size_t>(at), {kind, s, mb}) +
                                   " comes after " + action_text(consumed, s, mb) +
                                   " at index " + int_text(consumer) + ", which needs it");
                return {};
            };
            if (validation v = after(SEND_F, f, F); !v.ok) return v;
            if (validation v = before(RECV_F, f, F); !v.ok) return v;
            if (validation v = after(SEND_B, backward, backward_kind); !v.ok) return v;
            if (validation v = before(RECV_B, backward, backward_kind); !v.ok) return v;
        }
    }
    return {};
}

// In a lowered program each cross-rank boundary carries, per micro-batch, one activation
// forward and one gradient backward, each a SEND on one side and a RECV on the other.
[[nodiscard]] constexpr validation check_comm_pairs(const program& p,
                                                    const position_table& position) {
    using enum action_kind;
    for (int s = 0; s + 1 < p.num_stages; ++s) {
        const int here = p.stage_rank[static_cast<std::size_t>(s)];
        const int next = p.stage_rank[static_cast<std::size_t>(s + 1)];
        if (here == next) continue;
        const std::string why = " (stage " + int_text(s) + " runs on rank " + int_text(here) +
                                " and stage " + int_text(s + 1) + " on rank " + int_text(next) +
                                ")";
        for (int mb = 0; mb < p.num_microbatches; ++mb) {
            const struct {
                action_kind kind;
                int stage;
                int rank;
            } needed[] = {{SEND_F, s, here}, {RECV_F, s + 1, next},
                          {SEND_B, s + 1, next}, {RECV_B, s, here}};
            for (const auto& n : needed)
                if (position(n.kind, n.stage, mb) < 0)
                    return failure("missing " + action_text(n.kind, n.stage, mb) + " on rank " +
                                   int_text(n.rank) + why);
        }
    }
    return {};
}

// Runs the ranks round-robin, each as far as it can, with the engine's semantics: SENDs
// never block, a RECV waits for its SEND, compute waits for its inputs.
class simulation {
public:
    constexpr simulation(const program& p, const position_table& position)
        : p_(p),
          position_(position),
          done_(p.num_stages, p.num_microbatches, 0),
          weight_grads_done_(static_cast<std::size_t>(p.num_stages), 0),
          next_(static_cast<std::size_t>(p.num_ranks), 0) {}

    [[nodiscard]] constexpr validation run() {
        bool progress = true;
        while (progress) {
            progress = false;
            for (int r = 0; r < p_.num_ranks; ++r) {
                const auto& actions = p_.ranks[static_cast<std::size_t>(r)];
                std::size_t& next = next_[static_cast<std::size_t>(r)];
                while (next < actions.size()) {
                    const bool ready = !blocker(r, actions[next]).has_value();
                    if (!ready) break;
                    execute(actions[next]);
                    ++next;
                    progress = true;
                }
            }
        }
        std::string blocked;
        for (int r = 0; r < p_.num_ranks; ++r) {
            const auto& actions = p_.ranks[static_cast<std::size_t>(r)];
            const std::size_t next = next_[static_cast<std::size_t>(r)];
            if (next == actions.size()) continue;
            if (!blocked.empty()) blocked += "; ";
            blocked += where(r, next, actions[next]) + " waits for " +
                       describe(*blocker(r, actions[next]));
        }
        if (blocked.empty()) return {};
        return failure("deadlock: " + blocked);
    }

private:
    [[nodiscard]] constexpr bool is_done(action_kind kind, int stage, int microbatch) const {
        return done_(kind, stage, microbatch) != 0;
    }
    [[nodiscard]] constexpr bool backward_done(int stage, int microbatch) const {
        return is_done(action_kind::B, stage, microbatch) ||
               is_done(action_kind::I, stage, microbatch);
    }
    // The backward of (stage, mb) as the program spells it: I when split, else B.
    [[nodiscard]] constexpr action backward(int stage, int microbatch) const {
        return {position_(action_kind::I, stage, microbatch) >= 0 ? action_kind::I
                                                                  : action_kind::B,
                stage, microbatch};
    }

    // What `a` still waits for. An OVERLAP_F_B runs as its F then its backward, as one
    // step: it starts once both can, so its forward's output is not visible to other
    // ranks before the pair ends (lower() puts the SENDs after it).
    [[nodiscard]] constexpr std::optional<action> blocker(int r, const action& a) {
        if (a.kind != action_kind::OVERLAP_F_B) return waits_for(r, a);
        const action forward = forward_part(a);
        if (std::optional<action> missing = waits_for(r, forward)) return missing;
        int& forward_done = done_(action_kind::F, forward.stage, forward.microbatch);
        const int saved = forward_done;
        forward_done = 1;
        std::optional<action> missing = waits_for(r, backward_part(a));
        forward_done = saved;
        return missing;
    }

    constexpr void execute(const action& a) {
        if (a.kind == action_kind::OVERLAP_F_B) {
            execute(forward_part(a));
            execute(backward_part(a));
            return;
        }
        if (!is_tracked(a.kind)) return;
        done_(a.kind, a.stage, a.microbatch) = 1;
        if (a.kind == action_kind::B || a.kind == action_kind::W)
            ++weight_grads_done_[static_cast<std::size_t>(a.stage)];
    }

    // Text naming a missing prerequisite and where it sits in the program.
    [[nodiscard]] constexpr std::string describe(const action& needed) const {
        const int s = needed.stage;
        if (needed.kind == action_kind::REDUCE_GRAD)
            return "the weight gradients of all " + int_text(p_.num_microbatches) +
                   " microbatches of stage " + int_text(s) + " (" +
                   int_text(weight_grads_done_[static_cast<std::size_t>(s)]) + " done)";
        const int at = position_(needed.kind, s, needed.microbatch);
        const std::string text = to_string(needed);
        if (at < 0) return text + ", which is not in the program";
        return text + " (rank " + int_text(p_.stage_rank[static_cast<std::size_t>(s)]) +
               ", index " + int_text(at) + ")";
    }

    // The prerequisite `a` on rank `r` still waits for; none when it can run now. A
    // REDUCE_GRAD stands for "all weight gradients of the stage".
    [[nodiscard]] constexpr std::optional<action> waits_for(int r, const action& a) const {
        using enum action_kind;
        const int s = a.stage;
        const int mb = a.microbatch;
        const auto need = [&](bool ready, action needed) -> std::optional<action> {
            if (ready) return std::nullopt;
            return needed;
        };
        switch (a.kind) {
            case F: {
                if (s == 0) return std::nullopt;
                // A compute-only program has no RECVs: the producer running anywhere suffices.
                const bool local = p_.stage_rank[static_cast<std::size_t>(s - 1)] == r;
                if (local || !p_.lowered) return need(is_done(F, s - 1, mb), {F, s - 1, mb});
                return need(is_done(RECV_F, s, mb), {RECV_F, s, mb});
            }
            case B:
            case I: {
                if (!is_done(F, s, mb)) return action{F, s, mb};
                if (s + 1 == p_.num_stages) return std::nullopt;
                const bool local = p_.stage_rank[static_cast<std::size_t>(s + 1)] == r;
                if (local || !p_.lowered) return need(backward_done(s + 1, mb), backward(s + 1, mb));
                return need(is_done(RECV_B, s, mb), {RECV_B, s, mb});
            }
            case W: return need(is_done(I, s, mb), {I, s, mb});
            case SEND_F: return need(is_done(F, s, mb), {F, s, mb});
            case SEND_B: return need(backward_done(s, mb), backward(s, mb));
            case RECV_F: return need(is_done(SEND_F, s - 1, mb), {SEND_F, s - 1, mb});
            case RECV_B: return need(is_done(SEND_B, s + 1, mb), {SEND_B, s + 1, mb});
            case REDUCE_GRAD:
                return need(weight_grads_done_[static_cast<std::size_t>(s)] == p_.num_microbatches,
                            {REDUCE_GRAD, s, -1});
            default: return std::nullopt;
        }
    }

    const program& p_;
    const position_table& position_;
    position_table done_;
    std::vector<int> weight_grads_done_;
    std::vector<std::size_t> next_;
};

}  // namespace detail

[[nodiscard]] constexpr validation check(const program& p) {
    if (validation v = detail::check_sizes(p); !v.ok) return v;
    detail::position_table position(p.num_stages, p.num_microbatches, -1);
    if (validation v = detail::check_actions(p, position); !v.ok) return v;
    if (validation v = detail::check_stage_work(p, position); !v.ok) return v;
    if (p.lowered)
        if (validation v = detail::check_comm_pairs(p, position); !v.ok) return v;
    return detail::simulation(p, position).run();
}

[[nodiscard]] constexpr bool valid(const program& p) { return check(p).ok; }

}  // namespace weft::sched
