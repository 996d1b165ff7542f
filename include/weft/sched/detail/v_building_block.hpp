// The controllable-memory V schedules (Qi et al., "Pipeline Parallelism with Controllable
// Memory", NeurIPS 2024): one building block, the passes of a single micro-batch placed in
// time slots, repeated every 6 slots per micro-batch. How far apart the block puts a rank's
// forward and its backward fixes the activations it holds, so the block alone sets the peak.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched::detail {

// Rank r's passes of micro-batch 0, as slots (one pass of one chunk each) in the block: the
// forward of chunk 0 (stage r, down the V), the forward of chunk 1 (stage 2p-1-r, back up),
// the input gradient of chunk 1, then of chunk 0. Micro-batch k takes them 6k slots later:
// the 4 passes and 2 W's of a micro-batch keep each rank's slots full in the steady state.
struct v_block_slots {
    int forward_down = 0;
    int forward_up = 0;
    int input_grad_up = 0;
    int input_grad_down = 0;
};

inline constexpr int v_block_period = 6;

// The rank's order: the block repeated m times, read in slot order, a W put in each slot the
// blocks leave empty (chunk 1's first: its I came first), the W's still owed after the last
// slot at the end, chunk 1's before chunk 0's. That is the authors' construction without
// their optional reordering of the warm-up and cool-down, which only shortens those phases.
// Squeezing out the empty slots is what running the order does: a rank starts each action
// as soon as its inputs are there. Slots order every dependency (a forward comes after the
// previous stage's, an I after the next stage's), so the program cannot deadlock.
[[nodiscard]] constexpr std::vector<action> v_block_rank_actions(int p, int m, int r, const v_block_slots& b) {
    using enum action_kind;
    const int down = r;
    const int up = 2 * p - 1 - r;
    const int first[4] = {b.forward_down, b.forward_up, b.input_grad_up, b.input_grad_down};
    const action_kind kinds[4] = {F, F, I, I};
    const int stages[4] = {down, up, up, down};
    const int last = *std::max_element(first, first + 4) + v_block_period * (m - 1);
    // stage -1: a slot no block fills.
    std::vector<action> slots(static_cast<std::size_t>(last) + 1, action{F, -1, 0});
    for (int mb = 0; mb < m; ++mb)
        for (int t = 0; t < 4; ++t) {
            action& cell = slots[static_cast<std::size_t>(first[t] + v_block_period * mb)];
            // Two passes in one slot would mean the block collides with its own repetition.
            if (cell.stage >= 0)
                throw error("internal: the V building block collides with its repetition at rank " + int_text(r));
            cell = action{kinds[t], stages[t], mb};
        }
    std::vector<action> out;
    out.reserve(6 * static_cast<std::size_t>(m));
    int i_up = 0, i_down = 0, w_up = 0, w_down = 0;  // I's run and W's run per chunk
    for (const action& a : slots) {
        if (a.stage >= 0) {
            out.push_back(a);
            if (a.kind == I) ++(a.stage == up ? i_up : i_down);
        } else if (w_up < i_up) {
            out.push_back({W, up, w_up++});
        } else if (w_down < i_down) {
            out.push_back({W, down, w_down++});
        }
    }
    while (w_up < m) out.push_back({W, up, w_up++});
    while (w_down < m) out.push_back({W, down, w_down++});
    return out;
}

// The whole program for p ranks in the V placement, block(p, r) giving rank r's slots.
template <class Block>
[[nodiscard]] constexpr program v_block_program(int p, int m, Block block) {
    // 6 slots per micro-batch plus a warm-up of at most 6p: bounded by p * m, which
    // require_generator_arguments caps, and by p * p, capped here.
    if (static_cast<long long>(p) * p > max_rank_microbatch_product)
        throw invalid_argument("ranks", p,
                               "the V building block needs ranks * ranks <= " +
                                   int_text(max_rank_microbatch_product));
    program out = v_program(p, m);
    for (int r = 0; r < p; ++r) out.ranks[static_cast<std::size_t>(r)] = v_block_rank_actions(p, m, r, block(p, r));
    return out;
}

}  // namespace weft::sched::detail
