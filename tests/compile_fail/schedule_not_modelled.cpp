// Must NOT compile: a set of schedules with a member that is not a schedule, taken where
// the engine takes its Schedules parameter, has to stop the build with weft's one readable
// message. With -DWEFT_COMPILE_FAIL_CONTROL the member is a real schedule and the file
// compiles, which shows the failure comes from the concept check and nothing else.
#include <cstddef>
#include <string_view>

#include "weft/sched/any_of.hpp"
#include "weft/sched/gpipe.hpp"

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

using schedules = weft::sched::any_of<weft::sched::gpipe, candidate>;

// sizeof needs the complete type, which instantiates the static_assert; the dispatch is
// instantiated too, to show that it adds no second error.
std::size_t weft_compile_fail_probe() { return sizeof(weft::sched::require_schedule_set<schedules>); }
weft::sched::program weft_compile_fail_dispatch() { return schedules::generate(weft::schedule_kind{}, 2, 4); }
