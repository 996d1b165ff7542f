// Faults and joins played on purpose, read from their command-line words: --fail
// W@STEP[:forward|backward], --stall W@STEP:SECONDS, --slow W:FACTOR and --join W@STEP become
// the trainer's fault plan (worker_faults by worker id) and the steps new workers start before.
// Each refusal names the flag, the word given and the form it must take.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/worker_faults.hpp"

namespace weft::swarm {

// What --fail, --stall, --slow and --join ask for.
struct fault_plan {
    std::map<std::int64_t, worker_faults> faults;  // by worker id
    std::map<long long, long long> joins;          // worker id -> the step before which it starts
};

namespace detail {

// A non-negative integer of `flag`'s value `whole`, which must read as `form`.
inline long long parse_count(const std::string& text, const std::string& flag, const std::string& whole,
                             const std::string& form) {
    long long v = 0;
    const auto [end, failure] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (failure != std::errc() || end != text.data() + text.size() || v < 0)
        throw invalid_argument(flag, whole, "must read " + form + " with non-negative integers W and STEP");
    return v;
}

inline double parse_positive(const std::string& text, const std::string& flag, const std::string& whole) {
    try {
        std::size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size() && std::isfinite(v) && v > 0) return v;
    } catch (const std::exception&) {
    }
    throw invalid_argument(flag, whole, "needs a positive number after the colon");
}

}  // namespace detail

// The faults of --fail, --stall and --slow (each a list of the flag's words), by worker id.
// One worker may have several kinds of fault; a later word of one kind replaces an earlier one.
[[nodiscard]] inline std::map<std::int64_t, worker_faults> parse_faults(const std::vector<std::string>& fails,
                                                                        const std::vector<std::string>& stalls,
                                                                        const std::vector<std::string>& slows) {
    using detail::parse_count;
    std::map<std::int64_t, worker_faults> faults;
    for (const auto& f : fails) {
        const auto at = f.find('@');
        if (at == std::string::npos) throw invalid_argument("--fail", f, "must read W@STEP[:forward|backward]");
        const auto colon = f.find(':', at);
        const std::string form = "W@STEP[:forward|backward]";
        auto& w = faults[parse_count(f.substr(0, at), "--fail", f, form)];
        w.fail_step = parse_count(f.substr(at + 1, colon == std::string::npos ? std::string::npos : colon - at - 1),
                                  "--fail", f, form);
        if (colon != std::string::npos) {
            const std::string phase = f.substr(colon + 1);
            if (phase == "forward")
                w.fail_phase = worker_faults::phase::forward;
            else if (phase == "backward")
                w.fail_phase = worker_faults::phase::backward;
            else
                throw invalid_argument("--fail", f, "the phase after the colon must be forward or backward");
        }
    }
    for (const auto& s : stalls) {
        const auto at = s.find('@'), colon = s.find(':');
        if (at == std::string::npos || colon == std::string::npos || colon < at)
            throw invalid_argument("--stall", s, "must read W@STEP:SECONDS");
        auto& w = faults[parse_count(s.substr(0, at), "--stall", s, "W@STEP:SECONDS")];
        w.stall_step = parse_count(s.substr(at + 1, colon - at - 1), "--stall", s, "W@STEP:SECONDS");
        w.stall_seconds = detail::parse_positive(s.substr(colon + 1), "--stall", s);
    }
    for (const auto& s : slows) {
        const auto colon = s.find(':');
        if (colon == std::string::npos) throw invalid_argument("--slow", s, "must read W:FACTOR");
        auto& w = faults[parse_count(s.substr(0, colon), "--slow", s, "W:FACTOR")];
        w.slow_factor = detail::parse_positive(s.substr(colon + 1), "--slow", s);
        if (w.slow_factor < 1) throw invalid_argument("--slow", s, "FACTOR must be at least 1");
    }
    return faults;
}

// The joins of --join: worker id -> the step before which it starts. A worker named twice is
// refused.
[[nodiscard]] inline std::map<long long, long long> parse_joins(const std::vector<std::string>& joins) {
    std::map<long long, long long> by_id;
    for (const auto& j : joins) {
        const auto at = j.find('@');
        if (at == std::string::npos) throw invalid_argument("--join", j, "must read W@STEP");
        const long long id = detail::parse_count(j.substr(0, at), "--join", j, "W@STEP");
        if (by_id.contains(id)) throw invalid_argument("--join", j, "names worker " + std::to_string(id) + " twice");
        by_id[id] = detail::parse_count(j.substr(at + 1), "--join", j, "W@STEP");
    }
    return by_id;
}

[[nodiscard]] inline fault_plan parse_fault_plan(const std::vector<std::string>& fails,
                                                 const std::vector<std::string>& stalls,
                                                 const std::vector<std::string>& slows,
                                                 const std::vector<std::string>& joins) {
    fault_plan plan;
    plan.faults = parse_faults(fails, stalls, slows);
    plan.joins = parse_joins(joins);
    return plan;
}

// Where one program starts every worker (workers 0..initial_workers-1 at once, then the
// joins), each id of the plan can be checked before the run: a fault for a worker that never
// starts would never happen, and a join with the id of a worker already running would be
// refused by the trainer mid-run.
inline void check_spawned(const fault_plan& plan, long long initial_workers) {
    const std::string at_once = "--spawn starts workers 0.." + std::to_string(initial_workers - 1);
    for (const auto& [id, at] : plan.joins)
        if (id < initial_workers)
            throw invalid_argument("--join", std::to_string(id) + "@" + std::to_string(at),
                                   "must name a new worker: " + at_once);
    for (const auto& [id, fault] : plan.faults)
        if (id >= initial_workers && !plan.joins.contains(id))
            throw invalid_argument("--fail, --stall or --slow worker", id,
                                   "is not a worker this run starts: " + at_once + " and the --join ids");
}

}  // namespace weft::swarm
