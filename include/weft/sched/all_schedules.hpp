// The set of every schedule weft ships, for engines that pick any of them at run time
// (`weft::engine<weft::sched::all_schedules, ...>`) at the cost of instantiating all.
#pragma once

#include "weft/sched/any_of.hpp"
#include "weft/sched/schedule.hpp"

namespace weft::sched {

using all_schedules =
    any_of<gpipe, one_f_one_b, interleaved, looped_bfs, zb_h1, zb_h2, zbv, dualpipev, zb_auto>;

}  // namespace weft::sched
