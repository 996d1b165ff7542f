// Must NOT compile: an engine named with a sharding tag that has no code (a name and a ZeRO
// stage, but no shard::stage_sharding specialization) has to stop the build with one
// message. With -DWEFT_COMPILE_FAIL_CONTROL shard::replicate is used and the file compiles.
#include <cstddef>
#include <string_view>

#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
using candidate = weft::shard::replicate;
#else
struct tag_without_code {
    static constexpr std::string_view name = "mine";
    static constexpr int zero_stage = 1;
};
using candidate = tag_without_code;
#endif

using engine_t = weft::engine<weft::sched::gpipe, candidate, weft::comm::local, weft::exec::cpu>;

std::size_t weft_compile_fail_probe() { return sizeof(engine_t); }
