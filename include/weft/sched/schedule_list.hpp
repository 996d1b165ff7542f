// THE list of the schedules weft ships, written once; everything that enumerates them
// (all_schedules, the name list for --help and errors, parsing a name, dispatch by kind)
// is derived from it here. A new schedule is a header with a description and one entry below.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/core/type_list.hpp"
#include "weft/sched/dualpipev.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/interleaved.hpp"
#include "weft/sched/interleaved_zb.hpp"
#include "weft/sched/looped_bfs.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/sched/v_half.hpp"
#include "weft/sched/v_min.hpp"
#include "weft/sched/zb_auto.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/sched/zb_h2.hpp"
#include "weft/sched/zbv.hpp"

namespace weft::sched {

// In the order users see them listed (--help, error messages).
using schedule_list = type_list<gpipe, one_f_one_b, interleaved, looped_bfs, interleaved_zb, zb_h1, zb_h2, zbv, v_half,
                                v_min, dualpipev, zb_auto>;

namespace detail {

template <class... Schedules>
[[nodiscard]] constexpr bool all_model_schedule(type_list<Schedules...>) {
    return (schedule<Schedules> && ...);
}

template <class... Schedules>
[[nodiscard]] constexpr bool names_and_kinds_unique(type_list<Schedules...>) {
    return distinct_names<Schedules...>() && kinds_match_names<Schedules...>();
}

}  // namespace detail

static_assert(detail::all_model_schedule(schedule_list{}),
              "weft: every member of weft::sched::schedule_list must model weft::schedule");
static_assert(detail::names_and_kinds_unique(schedule_list{}),
              "weft: the members of weft::sched::schedule_list need unique names, each with a kind made from "
              "its own description (kinds compare by name)");

// "gpipe, 1f1b, interleaved, ...", in list order, for --help and error messages.
[[nodiscard]] inline std::string schedule_name_list() {
    std::string list;
    for_each_type(schedule_list{}, [&list]<class S>(std::type_identity<S>) {
        if (!list.empty()) list += ", ";
        list += S::name;
    });
    return list;
}

// The kind of the listed schedule called `name` ("1f1b", "zb-h1", ...).
[[nodiscard]] inline schedule_kind parse_schedule_kind(std::string_view name) {
    schedule_kind found{};
    for_each_type(schedule_list{}, [&]<class S>(std::type_identity<S>) {
        if (S::name == name) found = S::kind;
    });
    if (!found.chosen()) throw invalid_argument("schedule", name, "expected one of: " + schedule_name_list());
    return found;
}

namespace detail {

template <class... Schedules>
[[nodiscard]] constexpr program generate_listed(type_list<Schedules...>, schedule_kind kind,
                                                const schedule_params& params) {
    program result{};
    const bool found = ((Schedules::kind == kind && (result = Schedules::generate(params), true)) || ...);
    if (!found) {
        const std::string_view problem = kind.chosen() ? "it is not in weft::sched::schedule_list"
                                                       : "no schedule was chosen";
        throw invalid_argument("kind", kind, std::string(problem) + "; expected one of: " + schedule_name_list());
    }
    return result;
}

}  // namespace detail

// The program of the listed schedule `kind` names; weft::error for a kind not chosen or not listed.
[[nodiscard]] constexpr program generate(schedule_kind kind, const schedule_params& params) {
    return detail::generate_listed(schedule_list{}, kind, params);
}

// One chunk per rank and default costs; schedules that need two chunks reject it.
[[nodiscard]] constexpr program generate(schedule_kind kind, int ranks, int microbatches) {
    return generate(kind, schedule_params{.ranks = ranks, .microbatches = microbatches});
}

}  // namespace weft::sched
