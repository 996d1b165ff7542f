// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6; PyTorch's
// ScheduleZBVZeroBubble): two chunks per rank in a V (rank r holds stages r and 2p-1-r) with
// the backward split into I and W. With T_F = T_B = T_W and m >= 2p-1 no rank ever idles.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct zbv {
    static constexpr schedule_kind::description description{
        .name = "zbv", .chunks = detail::v_shaped_chunks};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // Rank r's order is PyTorch's: 2(p-r)-1 forwards of chunk 0; r pairs F(chunk 1), F(chunk 0);
    // p-r triples F I W of chunk 1; then steady F I W of chunk 0 and of chunk 1 alternating;
    // a cool-down of I's whose W's fill the tail. Peak live activations (rank 0's): min(m, p)
    // whole-rank micro-batches, i.e. 2p chunk micro-batches each counting 1/2.
    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        const int p = params.ranks;
        const int m = params.microbatches;
        detail::require_generator_arguments(p, m);
        detail::require_chunks(params, description);
        // The order is built for at least 2p-1 micro-batches (what fills the V) and the
        // ones beyond m are dropped, so the loops run p * max(m, 2p-1) times in all.
        const int filled = std::max(m, 2 * p - 1);
        if (static_cast<long long>(p) * filled > detail::max_rank_microbatch_product)
            throw invalid_argument("ranks", p,
                                   "zbv needs ranks * max(microbatches, 2 * ranks - 1) <= " +
                                       detail::int_text(detail::max_rank_microbatch_product) +
                                       " (microbatches = " + detail::int_text(m) + ")");

        program out = detail::v_program(p, m);  // stage s on rank s, stage 2p-1-s on rank s
        for (int r = 0; r < p; ++r) out.ranks[static_cast<std::size_t>(r)] = rank_actions(p, m, filled, r);
        return out;
    }

private:
    [[nodiscard]] static constexpr std::vector<action> rank_actions(int p, int m, int filled, int r) {
        using enum action_kind;
        const int down = r;            // chunk 0, on the way down the V
        const int up = 2 * p - 1 - r;  // chunk 1, on the way back up
        std::vector<action> out;
        out.reserve(6 * static_cast<std::size_t>(m));
        const auto emit = [&](action_kind kind, int stage, int mb) {
            if (mb < m) out.push_back({kind, stage, mb});
        };
        int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
        for (int k = 0; k < 2 * (p - r) - 1; ++k) emit(F, down, f0++);
        for (int k = 0; k < r; ++k) {
            emit(F, up, f1++);
            emit(F, down, f0++);
        }
        for (int k = 0; k < p - r; ++k) {
            emit(F, up, f1++);
            emit(I, up, b1);
            emit(W, up, b1++);
        }
        while (f1 < f0 || f0 < filled) {
            if (f0 < filled) emit(F, down, f0++);
            emit(I, down, b0);
            emit(W, down, b0++);
            emit(F, up, f1++);
            emit(I, up, b1);
            emit(W, up, b1++);
        }
        // Cool-down: input gradients first (they unblock the neighbours), weights after.
        int w0 = b0, w1 = b1;
        for (int k = 0; k < r; ++k) {
            emit(I, down, b0++);
            emit(I, up, b1++);
        }
        for (int k = 0; k < p - r; ++k) {
            emit(I, down, b0++);
            emit(W, down, w0++);
        }
        while (w1 < b1) emit(W, up, w1++);
        while (w0 < b0) emit(W, down, w0++);
        return out;
    }
};

}  // namespace weft::sched
