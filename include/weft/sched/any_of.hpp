// A compile-time set of schedules: every member is instantiated and the runtime
// config picks one by kind or name. `weft::engine<any_of<gpipe, one_f_one_b>, ...>` runs
// either, and gpipe (the first) when the config chooses none; a single schedule type is
// treated as the set of just that schedule.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/core/type_list.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

namespace detail {

// A member that does not model `schedule` is reported once, by require_schedule; these
// accessors let the rest of any_of compile for it, so that message is the only one.
template <class S>
[[nodiscard]] constexpr schedule_kind kind_of() {
    if constexpr (schedule<S>) return S::kind;
    else return {};
}
template <class S>
[[nodiscard]] constexpr std::string_view name_of() {
    if constexpr (schedule<S>) return S::name;
    else return "(not a schedule)";
}
template <class S>
[[nodiscard]] constexpr program generate_with(const schedule_params& params) {
    if constexpr (schedule<S>) {
        return S::generate(params);
    } else {
        (void)params;
        return program{};
    }
}

}  // namespace detail

// Not `template <schedule... Schedules>`: a constrained pack fails with a page of
// unsatisfied constraints before any static_assert of ours can name the problem.
template <class... Schedules>
struct any_of {
    static_assert(sizeof...(Schedules) >= 1, "weft::sched::any_of needs at least one schedule");
    // sizeof instantiates require_schedule<S>, whose static_assert names the bad member.
    static_assert(((sizeof(require_schedule<Schedules>) > 0) && ...));
    static_assert(detail::distinct_names<Schedules...>(),
                  "weft: weft::sched::any_of lists a schedule (or two schedules with one name) twice");

    using members = type_list<Schedules...>;
    static constexpr std::size_t size = sizeof...(Schedules);

    // What runs when the config chooses no schedule: the first member.
    [[nodiscard]] static constexpr schedule_kind default_kind() {
        return detail::kind_of<list_front_t<members>>();
    }

    [[nodiscard]] static constexpr bool contains(std::string_view name) {
        return ((detail::name_of<Schedules>() == name) || ...);
    }
    [[nodiscard]] static constexpr bool contains(schedule_kind kind) {
        return ((detail::kind_of<Schedules>() == kind) || ...);
    }

    // Comma-separated member names, for error messages.
    [[nodiscard]] static std::string names() {
        std::string list;
        ((list += (list.empty() ? "" : ", ") + std::string(detail::name_of<Schedules>())), ...);
        return list;
    }

    [[nodiscard]] static constexpr program generate(std::string_view name, const schedule_params& params) {
        program result{};
        const bool found = ((detail::name_of<Schedules>() == name &&
                             (result = detail::generate_with<Schedules>(params), true)) ||
                            ...);
        if (!found)
            throw invalid_argument("schedule", name, "this engine was compiled for: " + names());
        return result;
    }

    // A kind not chosen runs the first member, the engine's default schedule.
    [[nodiscard]] static constexpr program generate(schedule_kind kind, const schedule_params& params) {
        return generate(kind.chosen() ? kind.name() : default_kind().name(), params);
    }

    // One chunk per rank and default costs.
    [[nodiscard]] static constexpr program generate(std::string_view name, int ranks, int microbatches) {
        return generate(name, schedule_params{.ranks = ranks, .microbatches = microbatches});
    }

    [[nodiscard]] static constexpr program generate(schedule_kind kind, int ranks, int microbatches) {
        return generate(kind, schedule_params{.ranks = ranks, .microbatches = microbatches});
    }
};

namespace detail {
template <class T> struct as_schedule_set { using type = any_of<T>; };
template <class... S> struct as_schedule_set<any_of<S...>> { using type = any_of<S...>; };
}  // namespace detail

// any_of<S> for a single schedule S, the set itself for an any_of<...>.
template <class T>
using any_of_t = typename detail::as_schedule_set<T>::type;

namespace detail {
template <class T> inline constexpr bool is_schedule_set = schedule<T>;
template <class... S> inline constexpr bool is_schedule_set<any_of<S...>> = (schedule<S> && ...) && sizeof...(S) >= 1;
}  // namespace detail

// What an engine takes as its Schedules parameter: a schedule, or an any_of<...> of schedules.
template <class T>
concept schedule_set = detail::is_schedule_set<T>;

// What an engine takes as its Schedules parameter: a schedule type or an any_of<...> of them.
// Instantiate it (sizeof) where the parameter is taken: a member that is not a schedule
// yields require_schedule's one message (require_schedule<S> is one specialisation, so
// any_of's own check of S does not repeat it).
template <class T>
struct require_schedule_set {
    static_assert(sizeof(any_of_t<T>) > 0);
};

}  // namespace weft::sched
