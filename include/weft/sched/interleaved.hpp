// Interleaved 1F1B (Megatron-LM's forward_backward_pipelining_with_interleaving, PyTorch's
// ScheduleInterleaved1F1B): each rank holds v model chunks in a looped placement (stage s on
// rank s % p) and runs them depth first, which divides the 1F1B bubble by v.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct interleaved {
    static constexpr schedule_kind::description description{
        .name = "interleaved", .chunks = detail::looped_chunks};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // Megatron's microbatch_group_size_per_vp_stage picked for m micro-batches on p ranks:
    // p when p divides m (Megatron's default); otherwise the smallest g > p that Megatron
    // accepts (m % g == 0 or m % g >= p, so the last group fills the pipeline); m when m < p
    // (PyTorch's single round).
    [[nodiscard]] static constexpr int default_group_size(int ranks, int microbatches) {
        if (microbatches < ranks) return microbatches;
        int g = ranks;
        while (microbatches % g != 0 && microbatches % g < ranks) ++g;
        return g;
    }

    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        return generate(params, default_group_size(params.ranks, params.microbatches));
    }

    // With an explicit group size: the number of consecutive micro-batches each chunk runs
    // before the next chunk takes over. Megatron requires p <= g <= m and the last group
    // (m % g micro-batches) to be empty or at least p long; for m < p only g = m works.
    [[nodiscard]] static constexpr program generate(const schedule_params& params, int group_size) {
        detail::require_generator_arguments(params);
        const int p = params.ranks;
        const int m = params.microbatches;
        const int v = params.chunks;
        if (v == 1) {
            // Megatron runs its non-interleaved schedule for one chunk: plain 1F1B.
            if (m < p)
                throw invalid_argument("microbatches", m,
                                       "interleaved with chunks = 1 is 1F1B, which needs "
                                       "microbatches >= ranks (" + detail::int_text(p) + ")");
            return one_f_one_b::generate(p, m);
        }
        if (m < p) {
            if (group_size != m)
                throw invalid_argument("group_size", group_size,
                                       "with fewer microbatches (" + detail::int_text(m) +
                                           ") than ranks (" + detail::int_text(p) +
                                           ") all microbatches form one group; valid: " +
                                           detail::int_text(m));
        } else {
            if (group_size < p || group_size > m)
                throw invalid_argument("group_size", group_size,
                                       "must be in [ranks, microbatches] = [" + detail::int_text(p) +
                                           ", " + detail::int_text(m) + "]");
            if (m % group_size != 0 && m % group_size < p)
                throw invalid_argument(
                    "group_size", group_size,
                    "the last group would hold microbatches % group_size = " +
                        detail::int_text(m % group_size) + " microbatches, fewer than ranks = " +
                        detail::int_text(p) + " (it must be 0 or >= ranks); default: " +
                        detail::int_text(default_group_size(p, m)));
        }

        // The order in which every rank runs its forwards, as (micro-batch, chunk): groups of
        // group_size micro-batches, each run through chunk 0, then chunk 1, ...; the last
        // group takes the rest. Backwards follow the same table with the chunks mirrored.
        std::vector<int> table_mb;
        std::vector<int> table_chunk;
        table_mb.reserve(static_cast<std::size_t>(m) * static_cast<std::size_t>(v));
        table_chunk.reserve(static_cast<std::size_t>(m) * static_cast<std::size_t>(v));
        for (int first = 0; first < m; first += group_size) {
            const int end = first + group_size >= m ? m : first + group_size;
            for (int c = 0; c < v; ++c)
                for (int mb = first; mb < end; ++mb) {
                    table_mb.push_back(mb);
                    table_chunk.push_back(c);
                }
            if (end == m) break;
        }

        const int total = m * v;
        program out = detail::looped_program(p, v, m);
        for (int r = 0; r < p; ++r) {
            auto& actions = out.ranks[static_cast<std::size_t>(r)];
            actions.reserve(2 * static_cast<std::size_t>(total));
            const auto forward = [&](int k) {
                const auto i = static_cast<std::size_t>(k);
                actions.push_back({action_kind::F, table_chunk[i] * p + r, table_mb[i]});
            };
            const auto backward = [&](int k) {
                const auto i = static_cast<std::size_t>(k);
                actions.push_back({action_kind::B, (v - 1 - table_chunk[i]) * p + r, table_mb[i]});
            };
            // Enough forwards that the first backward's gradient has arrived by the time
            // they are done: two per hop to the last rank, plus the other chunks' first group.
            const long long wanted = 2LL * (p - r - 1) + static_cast<long long>(v - 1) * group_size;
            const int warmup = wanted < total ? static_cast<int>(wanted) : total;
            for (int k = 0; k < warmup; ++k) forward(k);
            for (int k = 0; k < total - warmup; ++k) {
                forward(warmup + k);
                backward(k);
            }
            for (int k = total - warmup; k < total; ++k) backward(k);
        }
        return out;
    }
};

}  // namespace weft::sched
