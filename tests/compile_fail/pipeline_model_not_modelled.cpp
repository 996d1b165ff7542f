// Must NOT compile: an engine over a model policy with a config and a batch type but no
// stages has to stop the build with one message naming what it lacks. With
// -DWEFT_COMPILE_FAIL_CONTROL models::mlp is used and the file compiles.
#include <cstddef>

#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/mlp.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
using candidate = weft::models::mlp;
#else
struct model_without_stages {
    using config = weft::nn::mlp_config;
    using batch = weft::data::classification_batch;
};
using candidate = model_without_stages;
#endif

using engine_t =
    weft::engine<weft::sched::gpipe, weft::shard::replicate, weft::comm::local, weft::exec::cpu, candidate>;

std::size_t weft_compile_fail_probe() { return sizeof(engine_t); }
