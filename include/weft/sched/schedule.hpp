// The `schedule` policy concept and the runtime choice of a schedule by kind.
// A schedule is a type with a `name` and a static, constexpr `generate(const schedule_params&)`
// returning a compute-only program.
#pragma once

#include <concepts>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/dualpipev.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/interleaved.hpp"
#include "weft/sched/looped_bfs.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/sched/zb_auto.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/sched/zb_h2.hpp"
#include "weft/sched/zbv.hpp"

namespace weft::sched {

template <class S>
concept schedule = requires {
    { S::name } -> std::convertible_to<std::string_view>;
    { S::generate(schedule_params{}) } -> std::same_as<program>;
};

static_assert(schedule<gpipe>);
static_assert(schedule<one_f_one_b>);
static_assert(schedule<interleaved>);
static_assert(schedule<looped_bfs>);
static_assert(schedule<zb_h1>);
static_assert(schedule<zb_h2>);
static_assert(schedule<zbv>);
static_assert(schedule<dualpipev>);
static_assert(schedule<zb_auto>);

[[nodiscard]] constexpr program generate(weft::schedule_kind kind, const schedule_params& params) {
    using enum weft::schedule_kind;
    switch (kind) {
        case gpipe: return sched::gpipe::generate(params);
        case one_f_one_b: return sched::one_f_one_b::generate(params);
        case interleaved: return sched::interleaved::generate(params);
        case looped_bfs: return sched::looped_bfs::generate(params);
        case zb_h1: return sched::zb_h1::generate(params);
        case zb_h2: return sched::zb_h2::generate(params);
        case zbv: return sched::zbv::generate(params);
        case dualpipev: return sched::dualpipev::generate(params);
        case zb_auto: return sched::zb_auto::generate(params);
    }
    throw invalid_argument("kind", static_cast<int>(kind),
                           "expected a weft::schedule_kind: " + schedule_name_list());
}

// One chunk per rank and default costs; schedules that need two chunks reject it.
[[nodiscard]] constexpr program generate(weft::schedule_kind kind, int ranks, int microbatches) {
    return generate(kind, schedule_params{.ranks = ranks, .microbatches = microbatches});
}

}  // namespace weft::sched

namespace weft {
using sched::schedule;
}  // namespace weft
