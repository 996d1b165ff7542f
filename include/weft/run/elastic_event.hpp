// What an elastic run reports when ranks leave, fail or join: one line for a person and one
// JSON object for the --log-json log ("event": "leave" | "failure" | "join"), with the layouts
// before and after, the bytes moved and the time from the event to training again.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/run/elastic_control.hpp"

namespace weft::run {

enum class elastic_event_kind { leave, failure, join };

[[nodiscard]] inline const char* elastic_event_name(elastic_event_kind kind) {
    switch (kind) {
        case elastic_event_kind::leave: return "leave";
        case elastic_event_kind::failure: return "failure";
        case elastic_event_kind::join: return "join";
    }
    return "unknown";
}

// The time an event's recovery spent in each phase, where the recovery measured it (a phase
// that did not run, e.g. restore_from_checkpoint after a leave with notice, stays empty).
struct elastic_phase_seconds {
    std::optional<double> start_joiners;            // a join's processes started, connected and ready,
                                                    // while the run trained on (not in the time to training)
    std::optional<double> prepare_layout;           // of that, the grown layout's communicators and the
                                                    // joiners' state buffers, made with the joiners
    std::optional<double> detect;                   // the event to every rank knowing of it
    std::optional<double> agree;                    // agreeing on who left, failed or joined
    std::optional<double> rebuild_communicators;    // the new world and its groups
    std::optional<double> check;                    // checking the new layout, every rank agreeing
    std::optional<double> plan;                     // the transition plan
    std::optional<double> move;                     // moving the state between ranks
    std::optional<double> build;                    // the new layout's engine: its buffers and groups
    std::optional<double> restore_from_checkpoint;  // state no live rank held, from the newest checkpoint
    std::optional<double> redo;                     // steps trained again since that checkpoint

    // The phases that ran, in order, by their JSON names.
    [[nodiscard]] std::vector<std::pair<const char*, double>> measured() const {
        std::vector<std::pair<const char*, double>> out;
        const std::pair<const char*, const std::optional<double>*> all[] = {
            {"start_joiners", &start_joiners},
            {"prepare_layout", &prepare_layout},
            {"detect", &detect},
            {"agree", &agree},
            {"rebuild_communicators", &rebuild_communicators},
            {"check", &check},
            {"plan", &plan},
            {"move", &move},
            {"build", &build},
            {"restore_from_checkpoint", &restore_from_checkpoint},
            {"redo", &redo}};
        for (const auto& [name, value] : all)
            if (value->has_value()) out.emplace_back(name, **value);
        return out;
    }
};

struct elastic_event {
    elastic_event_kind kind = elastic_event_kind::leave;
    long long step = 0;           // the event happened before this step
    std::optional<long long> asked_step;  // a join: the boundary its grow was agreed at
    std::vector<int> ranks;       // who left, failed or joined, numbered in the old world
                                  // (a join: the ranks the new processes take in the new one)
    std::string from;             // elastic::layout::describe() of the layout before
    std::string to;               // and after
    int world_from = 0;           // ranks before
    int world_to = 0;             // and after
    std::size_t bytes_moved = 0;  // sent between ranks, all ranks together
    std::size_t bytes_made_ahead = 0;  // a join: the joiners' state buffers, in memory before the move
    double seconds_to_training = 0;  // the event detected to training again
    elastic_phase_seconds phases;
};

// "elastic | leave | before step 7 | ranks 1,3 | world 4 -> 2 | from <layout> | to <layout> |
// moved 1.5 MiB | 120.0 ms to training (detect 1.0 ms, move 80.2 ms)", the line train_gpt
// prints for each event.
[[nodiscard]] inline std::string format_elastic_event(const elastic_event& e) {
    const auto ms = [](double seconds) {
        char text[48];
        std::snprintf(text, sizeof text, "%.1f ms", 1e3 * seconds);
        return std::string(text);
    };
    char moved[64];
    std::snprintf(moved, sizeof moved, "moved %.1f MiB", static_cast<double>(e.bytes_moved) / (1024.0 * 1024.0));
    std::string line = "elastic | ";
    line.append(elastic_event_name(e.kind)).append(" | before step ").append(std::to_string(e.step));
    if (e.asked_step) line.append(" (asked before step ").append(std::to_string(*e.asked_step)).append(")");
    line.append(" | ranks ").append(e.ranks.empty() ? std::string("none") : format_ranks(e.ranks));
    line.append(" | world ").append(std::to_string(e.world_from)).append(" -> ").append(std::to_string(e.world_to));
    line.append(" | from ").append(e.from).append(" | to ").append(e.to).append(" | ").append(moved);
    if (e.bytes_made_ahead > 0) {
        char ahead[64];
        std::snprintf(ahead, sizeof ahead, " (into %.1f MiB made ahead)",
                      static_cast<double>(e.bytes_made_ahead) / (1024.0 * 1024.0));
        line.append(ahead);
    }
    line.append(" | ").append(ms(e.seconds_to_training)).append(" to training");
    const auto phases = e.phases.measured();
    if (!phases.empty()) {
        line.append(" (");
        for (std::size_t i = 0; i < phases.size(); ++i) {
            if (i > 0) line.append(", ");
            line.append(phases[i].first).append(" ").append(ms(phases[i].second));
        }
        line.append(")");
    }
    return line;
}

// The event's object for the JSON log, in the style of the "switch" event (bytes as
// "moved_bytes", times in milliseconds); "phase_milliseconds" holds the phases measured.
[[nodiscard]] inline nlohmann::ordered_json elastic_event_json(const elastic_event& e) {
    nlohmann::ordered_json object{{"event", elastic_event_name(e.kind)},
                                  {"step", e.step},
                                  {"ranks", e.ranks},
                                  {"from", e.from},
                                  {"to", e.to},
                                  {"world_from", e.world_from},
                                  {"world_to", e.world_to},
                                  {"moved_bytes", e.bytes_moved},
                                  {"milliseconds", 1e3 * e.seconds_to_training}};
    if (e.asked_step) object["asked_before_step"] = *e.asked_step;
    if (e.kind == elastic_event_kind::join) object["made_ahead_bytes"] = e.bytes_made_ahead;
    nlohmann::ordered_json phases = nlohmann::ordered_json::object();
    for (const auto& [name, seconds] : e.phases.measured()) phases[name] = 1e3 * seconds;
    if (!phases.empty()) object["phase_milliseconds"] = std::move(phases);
    return object;
}

}  // namespace weft::run
