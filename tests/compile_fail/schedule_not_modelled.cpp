// Must NOT compile: an engine whose set of schedules holds a type that is not a schedule
// has to stop the build with one message. With -DWEFT_COMPILE_FAIL_CONTROL the member is a
// real schedule and the file compiles, which shows the failure comes from the concept check.
#include <cstddef>
#include <string_view>

#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
#include "weft/sched/one_f_one_b.hpp"
using candidate = weft::sched::one_f_one_b;
#else
// Close to a schedule (a name and a generator for sizes) but with no kind and no
// generate(const schedule_params&).
struct not_a_schedule {
    static constexpr std::string_view name = "mine";
    static weft::sched::program generate(int, int) { return {}; }
};
using candidate = not_a_schedule;
#endif

using engine_t = weft::engine<weft::sched::any_of<weft::sched::gpipe, candidate>, weft::shard::replicate,
                              weft::comm::local, weft::exec::cpu>;

std::size_t weft_compile_fail_probe() { return sizeof(engine_t); }
