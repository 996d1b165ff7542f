// The `schedule` policy concept: a type that names itself (its `name`, and the `kind` made
// from its constexpr `description`) and has a static, constexpr `generate(const schedule_params&)`
// returning a compute-only program. The schedules weft ships are listed in schedule_list.hpp.
#pragma once

#include <concepts>
#include <cstddef>
#include <string_view>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

// Named, so that a runtime config (a schedule_kind, or a name on a command line) can pick it.
template <class S>
concept named_schedule = requires {
    { S::name } -> std::convertible_to<std::string_view>;
    { S::kind } -> std::convertible_to<schedule_kind>;
};

// Generates the compute-only program for a layout; lower() adds the communication.
template <class S>
concept program_generator = requires {
    { S::generate(schedule_params{}) } -> std::same_as<program>;
};

template <class S>
concept schedule = named_schedule<S> && program_generator<S>;

// Instantiate (e.g. with sizeof) where a schedule is taken, so that a type which is not a
// schedule yields this one message rather than a page of substitution failures.
template <class S>
struct require_schedule {
    static_assert(schedule<S>,
                  "weft: this type does not model weft::schedule (it needs static constexpr `name` "
                  "(a std::string_view) and `kind` (a weft::schedule_kind, made from the type's constexpr "
                  "`description`), and `static constexpr program generate(const schedule_params&)`); "
                  "see weft/sched/schedule.hpp and weft/sched/gpipe.hpp");
};

namespace detail {

// True when no two of the schedules share a name (kinds compare by name). Also true when
// some are not schedules: require_schedule reports those, and alone.
template <class... Schedules>
[[nodiscard]] constexpr bool distinct_names() {
    if constexpr ((schedule<Schedules> && ...)) {
        const std::string_view names[] = {std::string_view(Schedules::name)..., {}};
        for (std::size_t i = 0; i < sizeof...(Schedules); ++i)
            for (std::size_t j = i + 1; j < sizeof...(Schedules); ++j)
                if (names[i] == names[j]) return false;
    }
    return true;
}

// True when each schedule's `kind` carries its own `name`: a kind made from another
// schedule's description would dispatch to the wrong generator. True for non-schedules as above.
template <class... Schedules>
[[nodiscard]] constexpr bool kinds_match_names() {
    if constexpr ((schedule<Schedules> && ...))
        return ((schedule_kind(Schedules::kind).name() == std::string_view(Schedules::name)) && ...);
    else
        return true;
}

}  // namespace detail

}  // namespace weft::sched

namespace weft {
using sched::schedule;
}  // namespace weft
