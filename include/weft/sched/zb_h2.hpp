// ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, handcrafted schedule 2):
// more warm-up forwards than 1F1B (2p-1-2r on rank r) and W's moved to wherever a rank would
// otherwise wait, for a bubble of (p-1)(T_F+T_B-2T_W), zero when T_F = T_B = T_W, at a peak of
// 2p-1 live micro-batches. Needs microbatches >= 2p-1 so that the warm-up can fill.
#pragma once

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

struct zb_h2 {
    static constexpr schedule_kind::description description{
        .name = "zb-h2", .chunks = detail::one_stage_per_rank};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // The order is the one every rank follows when all passes take one time unit: at each
    // step a rank runs the next I if its gradient has arrived, else the next F if its input
    // has arrived and fewer than 2p-1 micro-batches are live, else a pending W. That is the
    // paper's figure: 2p-1-2r forwards before rank r's first I, steady I/F/W triples, and
    // the W's that the last micro-batches' gradients leave room for piled up at the end.
    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        const int p = params.ranks;
        const int m = params.microbatches;
        if (m < 2 * p - 1)
            throw invalid_argument("microbatches", m,
                                   "zb-h2 needs microbatches >= 2 * ranks - 1 = " +
                                       detail::int_text(2 * p - 1) +
                                       " (its warm-up runs that many forwards on rank 0)");
        const int live_cap = 2 * p - 1;
        constexpr int never = -1;
        const auto cell = [m](int r, int mb) {
            return static_cast<std::size_t>(r) * static_cast<std::size_t>(m) +
                   static_cast<std::size_t>(mb);
        };
        // The step at whose end the F / I of (rank, micro-batch) finished.
        std::vector<int> forward_done(static_cast<std::size_t>(p) * static_cast<std::size_t>(m), never);
        std::vector<int> input_done(forward_done.size(), never);
        std::vector<int> next_f(static_cast<std::size_t>(p), 0);
        std::vector<int> next_i(static_cast<std::size_t>(p), 0);
        std::vector<int> next_w(static_cast<std::size_t>(p), 0);
        std::vector<action_kind> choice(static_cast<std::size_t>(p), action_kind::RESHARD);
        const auto finished_by = [](int done, int step) { return done != never && done <= step; };

        program out = detail::looped_program(p, 1, m);
        for (auto& actions : out.ranks) actions.reserve(3 * static_cast<std::size_t>(m));
        int remaining = p * m;  // W's still to run; the schedule ends with them
        // Each step runs at least one pass somewhere, so 3pm steps always suffice.
        const long long step_limit = 3LL * p * m + 2LL * p;
        for (int step = 0; remaining > 0; ++step) {
            if (step > step_limit)
                throw error("zb-h2: internal error, the schedule did not finish (ranks = " +
                            detail::int_text(p) + ", microbatches = " + detail::int_text(m) + ")");
            for (int r = 0; r < p; ++r) {
                const auto ru = static_cast<std::size_t>(r);
                const int f = next_f[ru];
                const int i = next_i[ru];
                const bool input_ready =
                    i < f && finished_by(forward_done[cell(r, i)], step) &&
                    (r == p - 1 || finished_by(input_done[cell(r + 1, i)], step));
                const bool forward_ready =
                    f < m && f - next_w[ru] < live_cap &&
                    (r == 0 || finished_by(forward_done[cell(r - 1, f)], step));
                if (input_ready)
                    choice[ru] = action_kind::I;
                else if (forward_ready)
                    choice[ru] = action_kind::F;
                else if (next_w[ru] < i)
                    choice[ru] = action_kind::W;
                else
                    choice[ru] = action_kind::RESHARD;  // idle this step
            }
            // Apply after all ranks chose: a pass finishing in this step is visible next step.
            for (int r = 0; r < p; ++r) {
                const auto ru = static_cast<std::size_t>(r);
                auto& actions = out.ranks[ru];
                switch (choice[ru]) {
                    case action_kind::I:
                        actions.push_back({action_kind::I, r, next_i[ru]});
                        input_done[cell(r, next_i[ru]++)] = step + 1;
                        break;
                    case action_kind::F:
                        actions.push_back({action_kind::F, r, next_f[ru]});
                        forward_done[cell(r, next_f[ru]++)] = step + 1;
                        break;
                    case action_kind::W:
                        actions.push_back({action_kind::W, r, next_w[ru]++});
                        --remaining;
                        break;
                    default: break;
                }
            }
        }
        return out;
    }
};

}  // namespace weft::sched
