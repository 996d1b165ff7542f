// Must NOT compile: weft::engine<..., comm::nccl, exec::cpu>. Both model their concepts, but
// NCCL moves device memory and the CPU backend computes in host memory: the build stops with
// one message saying so. With -DWEFT_COMPILE_FAIL_CONTROL the in-process (host) communicator
// is used and the file compiles.
#include <cstddef>

#include "weft/comm/local.hpp"
#include "weft/comm/nccl.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
using candidate = weft::comm::local;
#else
using candidate = weft::comm::nccl;
#endif

using engine_t = weft::engine<weft::sched::gpipe, weft::shard::replicate, candidate, weft::exec::cpu>;

std::size_t weft_compile_fail_probe() { return sizeof(engine_t); }
