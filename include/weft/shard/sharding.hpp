// The weft::sharding concept: how a stage's training state is spread over the
// data-parallel group. Issue-2 weft ships `replicate`; the ZeRO stages follow.
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
