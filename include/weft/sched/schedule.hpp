// The `schedule` policy concept and the runtime choice of a schedule by name.
// A schedule is a type with a `name` and a static, constexpr `generate(ranks, microbatches)`.
#pragma once

#include <concepts>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched {

template <class S>
concept schedule = requires {
    { S::name } -> std::convertible_to<std::string_view>;
    { S::generate(1, 1) } -> std::same_as<program>;
};

static_assert(schedule<gpipe>);
static_assert(schedule<one_f_one_b>);

[[nodiscard]] constexpr program generate(weft::schedule_kind kind, int ranks, int microbatches) {
    switch (kind) {
        case weft::schedule_kind::gpipe: return gpipe::generate(ranks, microbatches);
        case weft::schedule_kind::one_f_one_b: return one_f_one_b::generate(ranks, microbatches);
    }
    throw invalid_argument("kind", static_cast<int>(kind),
                           "expected a weft::schedule_kind (gpipe or one_f_one_b)");
}

}  // namespace weft::sched

namespace weft {
using sched::schedule;
}  // namespace weft
