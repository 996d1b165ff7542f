// Plain data parallelism: every replica holds the whole stage and the gradients are
// averaged over the data-parallel group before the optimizer step, in buckets started by
// the program's REDUCE_GRAD so that they travel while later actions compute
// (shard/stage_state.hpp).
#pragma once

#include <string_view>

namespace weft::shard {

struct replicate {
    static constexpr std::string_view name = "replicate";
    static constexpr int zero_stage = 0;
};

}  // namespace weft::shard
