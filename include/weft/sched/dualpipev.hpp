// DualPipeV, DeepSeek's DualPipe cut in half (deepseek-ai/DualPipe `dualpipev.py`, PyTorch's
// ScheduleDualPipeV): two chunks per rank in a V, and in the steady phase each forward of one
// chunk is paired with a backward of the other (OVERLAP_F_B) so their compute and comm overlap.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

// At T_F = T_B = T_W = T, T_comm = 0, and a pair costing the sum of its parts (simulate()'s
// model; on hardware the pair also hides its communication), rank 0 computes 3mT within a
// span of (3m + p - 1)T, so the bubble rate is (p - 1) / (3m + p - 1), and every rank holds at
// most 2p + 1 chunk micro-batches of activations (p + 1/2 of its whole share).
struct dualpipev {
    static constexpr schedule_kind::description description{
        .name = "dualpipev", .chunks = detail::v_shaped_chunks};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        const int p = params.ranks;
        const int m = params.microbatches;
        detail::require_generator_arguments(p, m);
        detail::require_chunks(params, description);
        // The steady phase of rank 0 runs m - 2p + 1 times; it must run at least once.
        if (m < 2 * p)
            throw invalid_argument(
                "microbatches", m,
                "dualpipev needs microbatches >= 2 * pipeline ranks (" + detail::int_text(2LL * p) + ")");
        program out = detail::v_program(p, m);  // stage s on rank s, stage 2p-1-s on rank s
        for (int r = 0; r < p; ++r) out.ranks[static_cast<std::size_t>(r)] = rank_builder(p, m, r).build();
        return out;
    }

private:
    // One rank's order, PyTorch's (and DeepSeek's) eight steps. Chunk 0 is stage r (going
    // down the V), chunk 1 stage 2p-1-r (coming back up). Micro-batches of each chunk's F
    // and of its backward are numbered in order; a split backward's W is queued and
    // issued where the reference has a gap to fill.
    class rank_builder {
    public:
        constexpr rank_builder(int p, int m, int r) : p_(p), m_(m), r_(r), stage_{r, 2 * p - 1 - r} {
            out_.reserve(6 * static_cast<std::size_t>(m));
            pending_w_.reserve(static_cast<std::size_t>(m));
        }

        [[nodiscard]] constexpr std::vector<action> build() {
            using enum action_kind;
            const int p = p_, m = m_, r = r_;
            for (int k = 0; k < 2 * (p - r - 1); ++k) forward(0);
            for (int k = 0; k <= r; ++k) {
                forward(0);
                forward(1);
            }
            for (int k = 0; k < p - r - 1; ++k) {
                backward(1, I);
                weight();
                forward(1);
            }
            for (int k = 0; k < m - 2 * p + r + 1; ++k) {
                // The last rank's first pair is not overlapped: its backward waits for the
                // gradient from rank p-2, and the forward alone fills that wait (the
                // reference does the same to shrink the bubble).
                if (k == 0 && r == p - 1) {
                    forward(0);
                    backward(1, B);
                } else {
                    overlapped(0, 1);
                }
                overlapped(1, 0);
            }
            for (int k = 0; k < p - r - 1; ++k) {
                backward(1, B);
                overlapped(1, 0);
            }
            // Drain: from the middle on (chunk 1 first on odd ranks, chunk 0 first on even
            // ones) backwards are split, so their W's fill the tail of the pipeline.
            bool split = false;
            for (int k = 0; k <= r; ++k) {
                if (k == (r + 1) / 2 && r % 2 == 1) split = true;
                backward(1, split ? I : B);
                if (k == (r + 1) / 2 && r % 2 == 0) split = true;
                backward(0, split ? I : B);
            }
            for (int k = 0; k < p - r - 1; ++k) {
                weight();
                backward(0, split ? I : B);
            }
            while (next_w_ < pending_w_.size()) weight();
            return out_;
        }

    private:
        struct pending {
            int stage;
            int microbatch;
        };

        constexpr void forward(int chunk) { out_.push_back({action_kind::F, stage_[chunk], next_f_[chunk]++}); }
        constexpr void backward(int chunk, action_kind kind) {
            const int mb = next_b_[chunk]++;
            out_.push_back({kind, stage_[chunk], mb});
            if (kind == action_kind::I) pending_w_.push_back({stage_[chunk], mb});
        }
        constexpr void weight() {
            if (next_w_ == pending_w_.size()) return;
            const pending w = pending_w_[next_w_++];
            out_.push_back({action_kind::W, w.stage, w.microbatch});
        }
        // Forward of chunk `f` overlapped with the full backward of chunk `b`.
        constexpr void overlapped(int f, int b) {
            const action fwd{action_kind::F, stage_[f], next_f_[f]++};
            const action bwd{action_kind::B, stage_[b], next_b_[b]++};
            out_.push_back(overlap_f_b(fwd, bwd));
        }

        int p_;
        int m_;
        int r_;
        int stage_[2];
        int next_f_[2]{};
        int next_b_[2]{};
        std::vector<action> out_;
        std::vector<pending> pending_w_;
        std::size_t next_w_ = 0;
    };
};

}  // namespace weft::sched
