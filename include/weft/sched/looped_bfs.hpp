// Looped BFS (Lamy-Poirier, "Breadth-First Pipeline Parallelism"; PyTorch's ScheduleLoopedBFS):
// v chunks per rank in a looped placement (stage s on rank s % p); each rank runs every
// micro-batch through its first chunk, then its second, ..., and the backwards the other way.
#pragma once

#include <cstddef>
#include <string_view>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/detail/generator_arguments.hpp"
#include "weft/sched/detail/placement.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_params.hpp"

namespace weft::sched {

struct looped_bfs {
    static constexpr schedule_kind::description description{
        .name = "looped-bfs", .chunks = detail::looped_chunks};
    static constexpr schedule_kind kind{description};
    static constexpr std::string_view name = description.name;

    // Backwards run the chunks last to first and, as in PyTorch, the micro-batches last to
    // first: the last forward's activations are the freshest. All m micro-batches of every
    // chunk are live at the turn, so peak activations are m (whole-rank micro-batches).
    [[nodiscard]] static constexpr program generate(const schedule_params& params) {
        detail::require_generator_arguments(params);
        detail::require_chunks(params, description);
        const int p = params.ranks;
        const int m = params.microbatches;
        const int v = params.chunks;
        program out = detail::looped_program(p, v, m);
        for (int r = 0; r < p; ++r) {
            auto& actions = out.ranks[static_cast<std::size_t>(r)];
            actions.reserve(2 * static_cast<std::size_t>(m) * static_cast<std::size_t>(v));
            for (int c = 0; c < v; ++c)
                for (int mb = 0; mb < m; ++mb) actions.push_back({action_kind::F, c * p + r, mb});
            for (int c = v - 1; c >= 0; --c)
                for (int mb = m - 1; mb >= 0; --mb) actions.push_back({action_kind::B, c * p + r, mb});
        }
        return out;
    }
};

}  // namespace weft::sched
