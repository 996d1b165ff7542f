// What an engine is configured with besides its policies and layout (batch, optimizer,
// message and sharding tuning, the stage partition), and what it reports of its memory.
#pragma once

#include <cstddef>
#include <vector>

#include "weft/optim/any_optimizer.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/train/recompute.hpp"

namespace weft::train {

struct engine_options {
    int batch_size = 32;  // global batch: rows (samples, or sequences) per step over all replicas
    optim::optimizer_options optimizer{};
    int recv_lookahead = 4;  // how many actions ahead RECVs are posted
    // Elements per data-parallel all-reduce bucket (shard::replicate).
    std::size_t bucket_elements = shard::default_bucket_elements;
    // Plain data parallelism: start each layer's gradient reduction as soon as the step's
    // last backward of its stage has finished it, overlapping the rest of the backward;
    // false: each stage's whole reduction starts at its REDUCE_GRAD (after that backward).
    bool overlap_reduce = true;
    // ZeRO-2/3: reduce gradients once per step (least traffic) or each layer per micro-batch,
    // ZeRO-3 then gathering parameters layer by layer (least memory); shard/zero_reduce.hpp.
    shard::zero_reduce zero_reduce = shard::zero_reduce::step;
    // ZeRO-3: how many compute actions ahead of a stage's first use its UNSHARD starts.
    int unshard_prefetch = 1;
    // Units (layers) per stage, in stage order, e.g. {3, 4, 4, 3}; empty = balanced by the
    // model's cost per unit (Model::unit_costs, e.g. GPT's flops), or even in unit count.
    std::vector<int> partition{};
    // Activation recompute (train/recompute.hpp): empty = none; one mode for every stage, or
    // one per stage in stage order.
    std::vector<recompute_mode> recompute{};
    // Clip the gradients to this global L2 norm before the update (train/grad_norm.hpp, as
    // PyTorch's clip_grad_norm_); 0: no clipping. The norm is measured and reported either way.
    double grad_clip = 0;
};

// What a rank holds for its stages: the training state between steps, its peak during a
// step (ZeRO-2/3 bring full buffers back for a while; optimizer state does not change
// size), and the most bytes of stashed activations at once during the last step.
struct memory_report {
    shard::memory_figures between_steps;
    shard::memory_figures peak;
    std::size_t peak_activations = 0;
    // What the stages' data-parallel collectives sent in the last step, by the ring model
    // (shard/collective_traffic.hpp): the price of the memory ZeRO saves.
    shard::collective_traffic traffic;
};

}  // namespace weft::train
