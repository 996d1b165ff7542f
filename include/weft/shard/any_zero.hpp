// The sharding policy that takes its ZeRO stage from the run's parallel_config, so that
// one compiled engine serves every stage (0 = replicate, 1..3 = zero<1..3>), as
// sched::any_of lets one engine serve several schedules. Programs that choose the stage on
// the command line (examples/train_gpt --zero) use it; code that fixes one names it.
#pragma once

#include <string_view>

namespace weft::shard {

struct any_zero {
    static constexpr std::string_view name = "any_zero";
    static constexpr int zero_stage = -1;  // -1: parallel_config::zero_stage() decides
};

}  // namespace weft::shard
