// The set of every schedule weft ships, for engines that pick any of them at run time
// (`weft::engine<weft::sched::all_schedules, ...>`) at the cost of instantiating all;
// derived from schedule_list, so it cannot miss one.
#pragma once

#include "weft/core/type_list.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/schedule_list.hpp"

namespace weft::sched {

using all_schedules = apply_list_t<schedule_list, any_of>;

}  // namespace weft::sched
