// Must NOT compile: an engine over a type that is close to a communicator (rank, size, a
// memory space) but has no point-to-point messages has to stop the build with one message,
// naming the part it lacks. With -DWEFT_COMPILE_FAIL_CONTROL the in-process communicator is
// used instead and the file compiles, which shows the failure comes from the concept check.
#include <cstddef>

#include "weft/comm/local.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
using candidate = weft::comm::local;
#else
struct not_a_communicator {
    using memory_space = weft::host_space;
    int rank() const { return 0; }
    int size() const { return 1; }
};
using candidate = not_a_communicator;
#endif

using engine_t = weft::engine<weft::sched::gpipe, weft::shard::replicate, candidate, weft::exec::cpu>;

// sizeof needs the complete type: the engine's class is instantiated, as a user's does.
std::size_t weft_compile_fail_probe() { return sizeof(engine_t); }
