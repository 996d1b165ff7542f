// Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble, the ZB-1P idea of Qi et al.
// on Megatron's looped placement): v chunks per rank, stage s on rank s % p, run depth first
// as interleaved 1F1B does, with the backward split into I and W so W fills the bubbles.
// The order is PyTorch 2.15's, action by action (tests/sched/reference holds its output).
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

struct interleaved_zb {
    static constexpr schedule_kind::description description{
        .name = "interleaved-zb", .chunks = detail::looped_chunks};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // PyTorch cuts the micro-batches into max(1, m / p) rounds of equal size and rejects an m
    // those rounds do not divide (m = 7 on 3 ranks: 2 rounds of 3.5). Fewer micro-batches than
    // ranks make one round; any multiple of p works.
    [[nodiscard]] static constexpr int rounds(int ranks, int microbatches) {
        return microbatches / ranks > 1 ? microbatches / ranks : 1;
    }

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        const int p = params.ranks;
        const int m = params.microbatches;
        const int v = params.chunks;
        const int n_rounds = rounds(p, m);
        if (m % n_rounds != 0)
            throw invalid_argument("microbatches", m,
                                   "interleaved-zb (as PyTorch's ScheduleInterleavedZeroBubble) splits "
                                   "the microbatches into max(1, microbatches / ranks) = " +
                                       detail::int_text(n_rounds) + " rounds of equal size; valid: fewer than ranks (" +
                                       detail::int_text(p) + ") or a multiple of the rounds, e.g. " +
                                       detail::int_text(m - m % n_rounds) + " or " +
                                       detail::int_text(m - m % n_rounds + n_rounds));
        const int round_size = m / n_rounds;
        program out = detail::looped_program(p, v, m);
        for (int r = 0; r < p; ++r)
            out.ranks[static_cast<std::size_t>(r)] = rank_actions(p, m, v, round_size, r);
        return out;
    }

private:
    // Rank r's order. Its j-th forward is (micro-batch, chunk) from a table of rounds, each
    // round running round_size micro-batches through chunk 0, then chunk 1, ...; its j-th I
    // reads the same table with the chunks mirrored. After w warm-up forwards, one forward and
    // one I alternate; the W of the k-th I follows the (k + r)-th I, so rank r keeps r W's back
    // to run in its cool-down, where rank r waits longest. PyTorch then passes over the ranks
    // in lock step, inserting an idle slot before a forward whose input is not there yet
    // (_add_bubbles_to_actions); that moves no action past another, and weft programs carry no
    // idle slots (a rank waits for its inputs when it runs), so the order below is the result.
    [[nodiscard]] static constexpr std::vector<action> rank_actions(int p, int m, int v, int round_size, int r) {
        using enum action_kind;
        const int total = m * v;  // forwards, I's and W's each
        // One forward less per hop than interleaved 1F1B's two (the I's are shorter than full
        // backwards), plus the other chunks' first round; never more than there are.
        const long long wanted = static_cast<long long>(v - 1) * round_size + (p - 1 - r);
        const int warmup = wanted < total ? static_cast<int>(wanted) : total;
        const auto at = [&](action_kind kind, int j) {
            const int in_round = j % (round_size * v);
            const int chunk = in_round / round_size;
            const int microbatch = j / (round_size * v) * round_size + in_round % round_size;
            const int local = kind == F ? chunk : v - 1 - chunk;
            return action{kind, local * p + r, microbatch};
        };
        std::vector<action> out;
        out.reserve(3 * static_cast<std::size_t>(total));
        for (int j = 0; j < warmup; ++j) out.push_back(at(F, j));
        for (int j = 0; j < total; ++j) {
            if (warmup + j < total) out.push_back(at(F, warmup + j));
            out.push_back(at(I, j));
            if (j >= r) out.push_back(at(W, j - r));
        }
        for (int j = total - r > 0 ? total - r : 0; j < total; ++j) out.push_back(at(W, j));
        return out;
    }
};

}  // namespace weft::sched
