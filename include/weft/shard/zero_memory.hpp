// The memory formula of each ZeRO stage in weft's pipeline engine: how many elements of
// parameters, gradients and optimizer state a data-parallel rank holds for a stage of
// `total` elements, between steps and at its peak within a step. The engine's memory
// report (train::engine::memory) must equal it; tests/shard checks that it does.
//
// With Psi = total, n ranks, s = ceil(Psi / n) (the range length), Psi~ = n * s (padded)
// and v = the real elements of this rank's range, c = optimizer states per element
// (AdamW 2, SGD with momentum 1):
//
//   ZeRO   between steps: params  grads  optimizer     peak in a step: params     grads
//   0                     Psi     Psi    c * Psi                       Psi        Psi
//   1                     Psi~    Psi~   c * v                         Psi~       Psi~ + s
//   2                     Psi~    0      c * v                         Psi~       Psi~ + s
//   3                     s       0      c * v                         Psi~ + s   Psi~ + s
//
// These are the per-step mode's (shard/zero_reduce.hpp); the per-micro-batch mode holds
// less during the step, by how many layers are in use, which no closed form gives.
// Unlike the ZeRO paper's 2Psi + (2+K)Psi/n for stage 2, gradients are not sharded
// during the step: a pipeline accumulates every micro-batch's weight gradients before
// one reduce-scatter at REDUCE_GRAD (as torch.distributed.pipelining does with FSDP),
// rather than reduce-scattering m times.
#pragma once

#include <cstddef>

#include "weft/core/error.hpp"
#include "weft/shard/flat_shard.hpp"
#include "weft/shard/stage_tensors.hpp"

namespace weft::shard {

struct zero_memory {
    memory_figures between_steps;
    memory_figures peak;  // optimizer_state as between steps
};

[[nodiscard]] inline zero_memory zero_memory_of(int zero_stage, std::size_t total, int ranks, int rank,
                                                std::size_t optimizer_states_per_element,
                                                std::size_t bytes_per_element) {
    require(zero_stage >= 0 && zero_stage <= 3, "zero_stage", zero_stage, "valid ZeRO stages are 0, 1, 2 and 3");
    const flat_shard r = shard_of(total, ranks, rank);
    const std::size_t c = optimizer_states_per_element;
    zero_memory m;
    switch (zero_stage) {
        case 0:
            m.between_steps = {total, total, c * total};
            m.peak = {total, total, c * total};
            break;
        case 1:
            m.between_steps = {r.padded, r.padded, c * r.valid()};
            m.peak = {r.padded, r.padded + r.size, c * r.valid()};
            break;
        case 2:
            m.between_steps = {r.padded, 0, c * r.valid()};
            m.peak = {r.padded, r.padded + r.size, c * r.valid()};
            break;
        default:
            m.between_steps = {r.size, 0, c * r.valid()};
            m.peak = {r.padded + r.size, r.padded + r.size, c * r.valid()};
            break;
    }
    for (memory_figures* f : {&m.between_steps, &m.peak}) {
        f->parameters *= bytes_per_element;
        f->gradients *= bytes_per_element;
        f->optimizer_state *= bytes_per_element;
    }
    return m;
}

}  // namespace weft::shard
