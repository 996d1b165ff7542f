// A compile-time set of schedules: every member is instantiated and the runtime
// config picks one by name. `weft::engine<any_of<gpipe, one_f_one_b>, ...>` runs
// either; a single schedule type is treated as the set of just that schedule.
#pragma once

#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

template <schedule... Schedules>
struct any_of {
    static_assert(sizeof...(Schedules) >= 1, "weft::sched::any_of needs at least one schedule");

    [[nodiscard]] static constexpr bool contains(std::string_view name) {
        return ((Schedules::name == name) || ...);
    }

    // Comma-separated member names, for error messages.
    [[nodiscard]] static std::string names() {
        std::string list;
        ((list += (list.empty() ? "" : ", ") + std::string(Schedules::name)), ...);
        return list;
    }

    [[nodiscard]] static constexpr program generate(std::string_view name, const schedule_params& params) {
        program result{};
        const bool found =
            ((Schedules::name == name && (result = Schedules::generate(params), true)) || ...);
        if (!found)
            throw invalid_argument("schedule", name, "this engine was compiled for: " + names());
        return result;
    }

    [[nodiscard]] static constexpr program generate(schedule_kind kind, const schedule_params& params) {
        return generate(to_string(kind), params);
    }

    // One chunk per rank and default costs.
    [[nodiscard]] static constexpr program generate(std::string_view name, int ranks, int microbatches) {
        return generate(name, schedule_params{.ranks = ranks, .microbatches = microbatches});
    }

    [[nodiscard]] static constexpr program generate(schedule_kind kind, int ranks, int microbatches) {
        return generate(to_string(kind), ranks, microbatches);
    }
};

namespace detail {
template <class T> struct as_schedule_set { using type = any_of<T>; };
template <class... S> struct as_schedule_set<any_of<S...>> { using type = any_of<S...>; };
}  // namespace detail

// any_of<S> for a single schedule S, the set itself for an any_of<...>.
template <class T>
using any_of_t = typename detail::as_schedule_set<T>::type;

}  // namespace weft::sched
