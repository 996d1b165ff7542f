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
