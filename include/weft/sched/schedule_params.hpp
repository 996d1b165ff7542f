// What a schedule generator is asked for: pipeline ranks, micro-batches, chunks
// (model pieces) per rank, and, for the searching generator zb-auto, the costs and a
// limit on live activations per rank.
#pragma once

#include "weft/sched/cost_model.hpp"

namespace weft::sched {

struct schedule_params {
    int ranks = 1;         // p: pipeline ranks
    int microbatches = 1;  // m
    int chunks = 1;        // v: model chunks (stages) per rank; stages = p * v
    cost_model costs{};    // zb-auto searches against these; others ignore them
    // zb-auto: most activations a rank may hold, in micro-batches of its whole share
    // of the model (a chunk's micro-batch counts 1/v). 0 = the default, p (1F1B's peak).
    int memory_limit = 0;
};

}  // namespace weft::sched
