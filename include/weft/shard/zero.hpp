// ZeRO (Rajbhandari et al., SC'20) over the data-parallel group, as a sharding policy:
//   zero<1>: optimizer moments sharded; every rank keeps full parameters and gradients.
//   zero<2>: gradients reduce-scattered too; the full gradient buffer lives only from the
//            step's first backward to its REDUCE_GRAD.
//   zero<3>: parameters sharded as well; the program's UNSHARD all-gathers a stage's
//            parameters ahead of its first use and RESHARD frees them after its last.
// The mechanics live in shard/stage_state.hpp; this is the policy the engine is named with.
#pragma once

#include <string_view>

namespace weft::shard {

template <int Stage>
struct zero {
    static_assert(Stage >= 1 && Stage <= 3, "weft::shard::zero<Stage>: valid ZeRO stages are 1, 2 and 3");
    static constexpr int zero_stage = Stage;
    static constexpr std::string_view name = Stage == 1 ? "zero<1>" : Stage == 2 ? "zero<2>" : "zero<3>";
};

}  // namespace weft::shard
