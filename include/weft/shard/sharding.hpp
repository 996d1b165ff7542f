// The weft::sharding concept: how a stage's training state is spread over the
// data-parallel group: `replicate` (ZeRO stage 0), `zero<1>`, `zero<2>`, `zero<3>`, and
// `any_zero` (-1: the parallel_config's stage). A policy is a tag (a name and a ZeRO
// stage); shard/stage_state.hpp does the work.
#pragma once

#include <concepts>
#include <span>
#include <string_view>

namespace weft::shard {

template <class S>
concept sharding = requires {
    { S::name } -> std::convertible_to<std::string_view>;
    { S::zero_stage } -> std::convertible_to<int>;
};

template <class S>
struct require_sharding {
    static_assert(sharding<S>,
                  "weft: this type does not model weft::sharding (it needs a static `name` and "
                  "`zero_stage`); see weft/shard/sharding.hpp");
};

}  // namespace weft::shard

namespace weft {
using shard::sharding;
}  // namespace weft
