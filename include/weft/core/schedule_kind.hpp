// The names of the pipeline schedules weft knows, as runtime values.
// core/ holds the list (not sched/) so that parallel_config can validate a
// schedule name without depending on the generators.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "weft/core/error.hpp"

namespace weft {

enum class schedule_kind { gpipe, one_f_one_b, interleaved, looped_bfs, zb_h1, zb_h2, zbv, dualpipev, zb_auto };

inline constexpr std::array<std::pair<schedule_kind, std::string_view>, 9> schedule_names{{
    {schedule_kind::gpipe, "gpipe"},
    {schedule_kind::one_f_one_b, "1f1b"},
    {schedule_kind::interleaved, "interleaved"},
    {schedule_kind::looped_bfs, "looped-bfs"},
    {schedule_kind::zb_h1, "zb-h1"},
    {schedule_kind::zb_h2, "zb-h2"},
    {schedule_kind::zbv, "zbv"},
    {schedule_kind::dualpipev, "dualpipev"},
    {schedule_kind::zb_auto, "zb-auto"},
}};

[[nodiscard]] constexpr std::string_view to_string(schedule_kind kind) {
    for (const auto& [k, name] : schedule_names)
        if (k == kind) return name;
    return "unknown";
}

// Model chunks per rank a schedule runs with when none is asked for: 2 where it
// interleaves chunks or folds the model into a V, 1 where it runs one stage per rank.
// The one place the examples, the CLI and the tests take this default from.
[[nodiscard]] constexpr int default_chunks(schedule_kind kind) {
    switch (kind) {
        case schedule_kind::interleaved:
        case schedule_kind::looped_bfs:
        case schedule_kind::zbv:
        case schedule_kind::dualpipev: return 2;
        default: return 1;
    }
}

// Comma-separated list of valid names, for error messages and --help.
[[nodiscard]] inline std::string schedule_name_list() {
    std::string list;
    for (const auto& [k, name] : schedule_names) {
        if (!list.empty()) list += ", ";
        list += name;
    }
    return list;
}

[[nodiscard]] inline schedule_kind parse_schedule_kind(std::string_view name) {
    for (const auto& [k, known] : schedule_names)
        if (known == name) return k;
    throw invalid_argument("schedule", name, "expected one of: " + schedule_name_list());
}

}  // namespace weft
