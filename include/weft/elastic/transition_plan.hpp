// The transition plan between two layouts: for every element of the virtual parameter space
// that a rank holds in the new layout, where it comes from. It is the set of intersections
// of old and new ownership (elastic/layout.hpp), moved straight from a holder to the new
// owner, with no rank in the middle. An element a new owner already holds is copied
// locally; otherwise exactly one holder sends it (replicas do not all send), chosen to
// spread the sending over the holders. Every rank computes the same plan from the two
// layouts alone, without communicating.
//
// The lower bound is what no plan can avoid moving: for each new owner, the elements it
// needs and does not hold. It is computed apart from the plan, by interval arithmetic, so
// that comparing the two checks the plan.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/elastic/layout.hpp"

namespace weft::elastic {

// One contiguous run to move: `length` elements from `from`'s buffer of stage `from_stage`
// (old layout) at flat element `from_flat`, to `to`'s buffer of stage `to_stage` (new
// layout) at `to_flat`. from == to is a local copy. A fan-out copy (from_new) reads the new
// layout's buffer of `from_stage` instead: a rank holding two copies of one element (a tied
// tensor on two of its stages) receives it once and copies it.
struct transfer {
    held_class what = held_class::parameters;
    int from = 0;
    int to = 0;
    int from_stage = 0;
    int to_stage = 0;
    std::size_t from_flat = 0;
    std::size_t to_flat = 0;
    std::size_t length = 0;
    bool from_new = false;
    [[nodiscard]] bool local() const { return from == to; }
};

// Where the state an old-layout rank held is now, on the communicator a transition runs
// on: `rank` there (-1: lost with a failed process), its stage indices moved up by
// `stage_offset` (a mirror of a failed rank's state sits beside its holder's own stages;
// elastic/state_snapshot.hpp). The identity (rank r, offset 0) is an ordinary switch.
struct state_source {
    int rank = -1;
    int stage_offset = 0;
    friend bool operator==(const state_source&, const state_source&) = default;
};

// What a plan with sources does with state no source holds: refuse (state_lost), or leave
// those elements zero in the new layout, for a restore from a checkpoint to overwrite.
enum class lost_state { not_possible, refused, zeroed };

// The sources of a leave: the world's ranks reordered so that those who stay come first (in
// rank order), then `leavers` (sorted); old rank r's state is at its new place, and the new
// layout's rank j is the j-th that stays.
[[nodiscard]] inline std::vector<state_source> stayers_first(int world, std::span<const int> leavers) {
    std::vector<state_source> sources(static_cast<std::size_t>(world));
    int next_stay = 0, next_leaver = world - static_cast<int>(leavers.size());
    for (int r = 0; r < world; ++r)
        sources[static_cast<std::size_t>(r)] = {
            std::binary_search(leavers.begin(), leavers.end(), r) ? next_leaver++ : next_stay++, 0};
    return sources;
}

// Some state of the current layout has no surviving copy (every holder failed, and so did
// the buddy that mirrored it): a run restores it from its newest checkpoint instead.
class state_lost : public weft::error {
public:
    using weft::error::error;
};

class transition_plan {
public:
    transition_plan(int world, std::vector<transfer> transfers, std::size_t lower_bound_parameters,
                    std::size_t lower_bound_optimizer)
        : world_(world),
          transfers_(std::move(transfers)),
          lower_bound_{lower_bound_parameters, lower_bound_optimizer} {}

    // Ranks taking part: the communicator's, spares included.
    [[nodiscard]] int world() const { return world_; }
    // Sorted by (what, fan-out last, from, to, from_stage, to_stage, to_flat): the order both
    // ends of a pair walk them.
    [[nodiscard]] const std::vector<transfer>& transfers() const { return transfers_; }

    // Elements of `what` sent between ranks (each counted once, at its receiver).
    [[nodiscard]] std::size_t elements_sent(held_class what) const {
        std::size_t n = 0;
        for (const transfer& t : transfers_)
            if (t.what == what && !t.local()) n += t.length;
        return n;
    }
    [[nodiscard]] std::size_t elements_copied_locally(held_class what) const {
        std::size_t n = 0;
        for (const transfer& t : transfers_)
            if (t.what == what && t.local()) n += t.length;
        return n;
    }
    // Elements of `what` no plan can avoid sending.
    [[nodiscard]] std::size_t lower_bound_elements(held_class what) const {
        return lower_bound_[what == held_class::parameters ? 0 : 1];
    }

    // Bytes: parameters are one tensor of `element_size`-byte scalars, optimizer state is
    // `state_tensors` of them (2 for AdamW; 0 before its first step).
    [[nodiscard]] std::size_t bytes_sent(std::size_t element_size, std::size_t state_tensors) const {
        return element_size *
               (elements_sent(held_class::parameters) + state_tensors * elements_sent(held_class::optimizer_state));
    }
    [[nodiscard]] std::size_t lower_bound_bytes(std::size_t element_size, std::size_t state_tensors) const {
        return element_size * (lower_bound_elements(held_class::parameters) +
                               state_tensors * lower_bound_elements(held_class::optimizer_state));
    }
    // Bytes `from` sends `to` (from != to).
    [[nodiscard]] std::size_t pair_bytes(int from, int to, std::size_t element_size, std::size_t state_tensors) const {
        std::size_t n = 0;
        for (const transfer& t : transfers_)
            if (t.from == from && t.to == to && !t.local())
                n += t.length * (t.what == held_class::parameters ? 1 : state_tensors);
        return n * element_size;
    }

    // The plan as text: bytes per rank pair (a matrix, sender by row), the total and the
    // lower bound.
    [[nodiscard]] std::string describe(std::size_t element_size, std::size_t state_tensors) const {
        std::string text = "bytes sent (row: from, column: to)\n      ";
        for (int to = 0; to < world_; ++to) text += pad("to " + std::to_string(to), 12);
        text += "\n";
        for (int from = 0; from < world_; ++from) {
            text += pad(std::to_string(from), 6);
            for (int to = 0; to < world_; ++to)
                text += pad(from == to ? "-" : std::to_string(pair_bytes(from, to, element_size, state_tensors)), 12);
            text += "\n";
        }
        text += "total " + std::to_string(bytes_sent(element_size, state_tensors)) + " bytes, lower bound " +
                std::to_string(lower_bound_bytes(element_size, state_tensors)) + " bytes, copied locally " +
                std::to_string(element_size * (elements_copied_locally(held_class::parameters) +
                                               state_tensors * elements_copied_locally(held_class::optimizer_state))) +
                " bytes\n";
        return text;
    }

private:
    static std::string pad(std::string s, std::size_t width) {
        if (s.size() < width) s.insert(0, width - s.size(), ' ');
        return s;
    }

    int world_;
    std::vector<transfer> transfers_;
    std::size_t lower_bound_[2];
};

namespace detail {

// Segments of one tensor, grouped by tensor name.
using segments_by_tensor = std::map<std::string, std::vector<segment>>;

inline segments_by_tensor group_by_tensor(const layout& l, held_class what) {
    // By index first: one name lookup per tensor, not per segment.
    std::vector<std::vector<segment>> by_index(l.tensor_names().size());
    for (const segment& s : l.segments(what)) by_index[static_cast<std::size_t>(s.tensor)].push_back(s);
    segments_by_tensor out;
    for (std::size_t i = 0; i < by_index.size(); ++i)
        if (!by_index[i].empty()) out.emplace(l.tensor_names()[i], std::move(by_index[i]));
    return out;
}

// The union of [first, last) intervals, as sorted disjoint intervals.
inline std::vector<std::pair<std::size_t, std::size_t>> interval_union(
    std::vector<std::pair<std::size_t, std::size_t>> v) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (const auto& [a, b] : v) {
        if (!out.empty() && a <= out.back().second)
            out.back().second = std::max(out.back().second, b);
        else
            out.emplace_back(a, b);
    }
    return out;
}

// Elements of `need` (a union) not in `have` (a union).
inline std::size_t uncovered(const std::vector<std::pair<std::size_t, std::size_t>>& need,
                             const std::vector<std::pair<std::size_t, std::size_t>>& have) {
    std::size_t missing = 0;
    std::size_t h = 0;
    for (const auto& [a, b] : need) {
        std::size_t at = a;
        while (h < have.size() && have[h].second <= at) ++h;
        for (std::size_t k = h; k < have.size() && have[k].first < b && at < b; ++k) {
            if (have[k].first > at) missing += have[k].first - at;
            at = std::max(at, have[k].second);
        }
        if (at < b) missing += b - at;
    }
    return missing;
}

inline std::size_t lower_bound_of(const segments_by_tensor& old_segments, const segments_by_tensor& new_segments) {
    std::size_t total = 0;
    for (const auto& [name, needed] : new_segments) {
        std::map<int, std::vector<std::pair<std::size_t, std::size_t>>> need, have;
        for (const segment& s : needed) need[s.rank].emplace_back(s.global, s.global + s.length);
        if (const auto it = old_segments.find(name); it != old_segments.end())
            for (const segment& s : it->second) have[s.rank].emplace_back(s.global, s.global + s.length);
        for (auto& [rank, intervals] : need) total += uncovered(interval_union(intervals), interval_union(have[rank]));
    }
    return total;
}

// The transfers of one tensor: a sweep over the elementary intervals between all segment
// boundaries, with the old holders and new needers active on each.
inline void plan_tensor(held_class what, const std::string& name, const std::vector<segment>& holders,
                        const std::vector<segment>& needers, std::vector<std::size_t>& sent_by_rank,
                        std::vector<transfer>& out, lost_state lost) {
    std::vector<std::size_t> bounds;
    for (const auto* list : {&holders, &needers})
        for (const segment& s : *list) {
            bounds.push_back(s.global);
            bounds.push_back(s.global + s.length);
        }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    auto by_start = [](const std::vector<segment>& v) {
        std::vector<std::size_t> order(v.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a].global < v[b].global; });
        return order;
    };
    const auto holder_order = by_start(holders);
    const auto needer_order = by_start(needers);
    std::size_t next_holder = 0, next_needer = 0;
    std::vector<std::size_t> active_holders, active_needers;
    // The holder each needer segment took its previous piece from: kept while it covers, so
    // that a needer's run comes from one holder in one piece where it can.
    constexpr std::size_t none = static_cast<std::size_t>(-1);
    std::vector<std::size_t> previous_source(needers.size(), none);
    std::vector<std::pair<int, const segment*>> received_on;  // per needer rank: the segment that got a piece first
    for (std::size_t b = 0; b + 1 < bounds.size(); ++b) {
        const std::size_t first = bounds[b], last = bounds[b + 1];
        auto refresh = [&](std::vector<std::size_t>& active, const std::vector<segment>& v,
                           const std::vector<std::size_t>& order, std::size_t& next) {
            active.erase(std::remove_if(active.begin(), active.end(),
                                        [&](std::size_t i) { return v[i].global + v[i].length <= first; }),
                         active.end());
            while (next < order.size() && v[order[next]].global <= first) {
                if (v[order[next]].global + v[order[next]].length > first) active.push_back(order[next]);
                ++next;
            }
        };
        refresh(active_holders, holders, holder_order, next_holder);
        refresh(active_needers, needers, needer_order, next_needer);
        if (active_needers.empty()) continue;
        if (active_holders.empty() && lost == lost_state::zeroed) continue;  // the new buffer keeps its zeros
        if (active_holders.empty() && lost == lost_state::refused)
            throw state_lost("elements [" + std::to_string(first) + ", " + std::to_string(last) + ") of " + name +
                             " were held only by failed ranks (and their mirrors)");
        if (active_holders.empty())
            throw error("layout switch: elements [" + std::to_string(first) + ", " + std::to_string(last) + ") of " +
                        name + " are held by no rank of the current layout; the two layouts are of " +
                        "different models");
        std::sort(active_needers.begin(), active_needers.end());
        received_on.clear();
        for (const std::size_t n : active_needers) {
            const segment& need = needers[n];
            const std::size_t to_flat = need.flat + (first - need.global);
            const auto it = std::find_if(received_on.begin(), received_on.end(),
                                         [&](const auto& entry) { return entry.first == need.rank; });
            if (it != received_on.end()) {
                const segment& got = *it->second;
                out.push_back({what, need.rank, need.rank, got.stage, need.stage, got.flat + (first - got.global),
                               to_flat, last - first, true});
                continue;
            }
            received_on.emplace_back(need.rank, &need);
            std::size_t source = active_holders.front();
            bool local = false;
            for (const std::size_t h : active_holders)
                if (holders[h].rank == need.rank) {
                    source = h;
                    local = true;
                    break;
                }
            if (!local) {
                const std::size_t previous = previous_source[n];
                const bool keep = previous != none && std::find(active_holders.begin(), active_holders.end(),
                                                                previous) != active_holders.end();
                if (keep) {
                    source = previous;
                } else {
                    for (const std::size_t h : active_holders) {
                        const auto load = [&](std::size_t i) {
                            return std::pair(sent_by_rank[static_cast<std::size_t>(holders[i].rank)], holders[i].rank);
                        };
                        if (load(h) < load(source)) source = h;
                    }
                }
                sent_by_rank[static_cast<std::size_t>(holders[source].rank)] += last - first;
            }
            previous_source[n] = source;
            const segment& have = holders[source];
            out.push_back({what, have.rank, need.rank, have.stage, need.stage, have.flat + (first - have.global),
                           to_flat, last - first, false});
        }
    }
}

// Joins runs that continue each other at both ends.
inline std::vector<transfer> merged(std::vector<transfer> v) {
    std::sort(v.begin(), v.end(), [](const transfer& a, const transfer& b) {
        if (a.what != b.what) return a.what < b.what;
        if (a.from_new != b.from_new) return b.from_new;
        if (a.from != b.from) return a.from < b.from;
        if (a.to != b.to) return a.to < b.to;
        if (a.from_stage != b.from_stage) return a.from_stage < b.from_stage;
        if (a.to_stage != b.to_stage) return a.to_stage < b.to_stage;
        return a.to_flat < b.to_flat;
    });
    std::vector<transfer> out;
    for (const transfer& t : v) {
        if (!out.empty()) {
            transfer& p = out.back();
            if (p.what == t.what && p.from_new == t.from_new && p.from == t.from && p.to == t.to &&
                p.from_stage == t.from_stage && p.to_stage == t.to_stage && p.to_flat + p.length == t.to_flat &&
                p.from_flat + p.length == t.from_flat) {
                p.length += t.length;
                continue;
            }
        }
        out.push_back(t);
    }
    return out;
}

// The old layout's segments as they are now held: by the rank `sources` names for their
// holder, their stages moved by its offset; those of lost holders dropped.
inline segments_by_tensor relocated(segments_by_tensor segments, std::span<const state_source> sources) {
    for (auto& [name, list] : segments) {
        std::vector<segment> kept;
        for (segment s : list) {
            const state_source& where = sources[static_cast<std::size_t>(s.rank)];
            if (where.rank < 0) continue;
            s.rank = where.rank;
            s.stage += where.stage_offset;
            kept.push_back(s);
        }
        list = std::move(kept);
    }
    return segments;
}

}  // namespace detail

// The plan from `from` to `to` over a communicator of `world` ranks. `sources[r]` says where
// old rank r's state is on that communicator (state_source); empty: where it was, so the
// world must be at least either layout's (ranks beyond a layout hold nothing in it). A new
// layout's rank j is rank j of the communicator. With sources, state no source holds any
// more is a state_lost, or with `lost` = zeroed, zeros in the new layout.
[[nodiscard]] inline transition_plan plan_transition(const layout& from, const layout& to, int world,
                                                     std::span<const state_source> sources = {},
                                                     lost_state lost = lost_state::refused) {
    const bool relocating = !sources.empty();
    if (relocating) {
        require(static_cast<int>(sources.size()) == from.ranks(), "state sources", sources.size(),
                "must name one per rank of the current layout (" + std::to_string(from.ranks()) + ")");
        for (const state_source& s : sources)
            require(s.rank < world && s.stage_offset >= 0, "state source rank", s.rank,
                    "must be -1 (lost) or a rank of the " + std::to_string(world) + " taking part");
    }
    require((relocating || world >= from.ranks()) && world >= to.ranks(), "world", world,
            "must be at least both layouts' world sizes (" + std::to_string(from.ranks()) + " and " +
                std::to_string(to.ranks()) + ")");
    std::vector<transfer> transfers;
    std::size_t bounds[2] = {0, 0};
    for (const held_class what : {held_class::parameters, held_class::optimizer_state}) {
        const auto old_segments = relocating ? detail::relocated(detail::group_by_tensor(from, what), sources)
                                             : detail::group_by_tensor(from, what);
        const auto new_segments = detail::group_by_tensor(to, what);
        std::vector<std::size_t> sent_by_rank(static_cast<std::size_t>(world), 0);
        for (const auto& [name, needers] : new_segments) {
            const auto it = old_segments.find(name);
            if (it == old_segments.end())
                throw invalid_argument("layout switch: tensor", name,
                                       "is in the new layout but not the current one; the layouts are of different "
                                       "models");
            detail::plan_tensor(what, name, it->second, needers, sent_by_rank, transfers,
                                relocating ? lost : lost_state::not_possible);
        }
        bounds[what == held_class::parameters ? 0 : 1] = detail::lower_bound_of(old_segments, new_segments);
    }
    return transition_plan(world, detail::merged(std::move(transfers)), bounds[0], bounds[1]);
}

}  // namespace weft::elastic
