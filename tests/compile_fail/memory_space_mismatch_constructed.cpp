// Must NOT compile: a program that constructs weft::engine<..., comm::nccl, exec::cpu> and
// steps it, as every program does, stops with memory_space_mismatch.cpp's one message and no
// second error about the engine that was not made ("too many initializers", "no member named
// 'step'"). With -DWEFT_COMPILE_FAIL_CONTROL the in-process (host) communicator is used and
// the file compiles.
#include "weft/comm/local.hpp"
#include "weft/comm/nccl.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/data/synthetic_dataset.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
using candidate = weft::comm::local;
#else
using candidate = weft::comm::nccl;
#endif

double weft_compile_fail_probe(candidate& world) {
    const weft::parallel_config layout({.pp = 1, .microbatches = 2, .world_size = 1});
    const weft::nn::mlp_config model{.input_dim = 8, .hidden_dim = 8, .num_blocks = 1, .num_classes = 2};
    weft::engine<weft::sched::gpipe, weft::shard::replicate, candidate, weft::exec::cpu> engine(
        world, layout, model, {.batch_size = 4, .optimizer = {.lr = 1e-2}});
    const weft::data::synthetic_dataset data(8, 2, /*seed=*/1);
    const auto stats = engine.step(data.batch(0, 4));
    return stats.loss + engine.evaluate(data.batch(1, 4));
}
