// A simulated program as a Chrome / Perfetto trace (the JSON "traceEvents" format): one
// thread per rank, one complete ("X") event per compute action. Open it in ui.perfetto.dev
// or chrome://tracing. One time unit of the cost model is shown as one millisecond.
#pragma once

#include <cstddef>
#include <string>

#include "weft/core/error.hpp"
#include "weft/core/json_text.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/simulate.hpp"

namespace weft::sched {

namespace detail {

// Trace timestamps are microseconds; costs are usually given in milliseconds.
inline constexpr double trace_microseconds_per_unit = 1000;

[[nodiscard]] inline std::string trace_event_name(const action& a) {
    if (a.kind == action_kind::OVERLAP_F_B) {
        const action backward = backward_part(a);
        return "F mb" + std::to_string(a.microbatch) + " + " + std::string(to_string(backward.kind)) + " mb" +
               std::to_string(backward.microbatch);
    }
    return std::string(to_string(a.kind)) + " mb" + std::to_string(a.microbatch);
}

}  // namespace detail

[[nodiscard]] inline std::string render_trace(const program& p, const simulation& sim) {
    require(sim.timeline.size() == p.ranks.size(), "simulation.timeline.size()", sim.timeline.size(),
            "must equal the program's number of ranks (" + std::to_string(p.ranks.size()) +
                "); pass the simulation of this program");
    using weft::detail::json_string;
    using weft::detail::number_text;
    std::string out = "{\"traceEvents\":[\n";
    bool first = true;
    const auto add = [&](const std::string& event) {
        if (!first) out += ",\n";
        first = false;
        out += event;
    };
    add(R"({"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"pipeline"}})");
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        const std::string tid = std::to_string(r);
        add(R"({"name":"thread_name","ph":"M","pid":0,"tid":)" + tid + R"(,"args":{"name":"rank )" + tid + "\"}}");
        add(R"({"name":"thread_sort_index","ph":"M","pid":0,"tid":)" + tid + R"(,"args":{"sort_index":)" + tid + "}}");
    }
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        for (const timed_action& t : sim.timeline[r]) {
            const action& a = t.what;
            if (!is_compute(a.kind)) continue;
            std::string args = "\"action\":" + json_string(to_string(a)) + ",\"stage\":" + std::to_string(a.stage) +
                               ",\"microbatch\":" + std::to_string(a.microbatch);
            if (a.kind == action_kind::OVERLAP_F_B)
                args += ",\"backward\":" + json_string(detail::plain_action_text(backward_part(a)));
            add("{\"name\":" + json_string(detail::trace_event_name(a)) + ",\"cat\":" + json_string(to_string(a.kind)) +
                ",\"ph\":\"X\",\"ts\":" + number_text(t.start * detail::trace_microseconds_per_unit) +
                ",\"dur\":" + number_text((t.end - t.start) * detail::trace_microseconds_per_unit) +
                ",\"pid\":0,\"tid\":" + std::to_string(r) + ",\"args\":{" + args + "}}");
        }
    }
    out += "\n],\"displayTimeUnit\":\"ms\"}\n";
    return out;
}

[[nodiscard]] inline std::string render_trace(const program& p, const cost_model& costs = {}) {
    return render_trace(p, simulate(p, costs));
}

}  // namespace weft::sched
