// How a communicator pairs a receive with a send: by (source, tag), as MPI and comm::local
// do, or per peer in posting order whatever the tag, as NCCL does. A program that is right
// under one rule can be silently wrong under the other: two same-sized messages from one
// peer, posted in one order and received in the other, swap buffers. So a communicator
// that ignores tags says so, and what sends several streams of messages to one peer (the
// pipeline's activations and gradients) gives each stream its own channel
// (sched/message_channels.hpp).
#pragma once

#include <string_view>

namespace weft::comm {

enum class message_matching {
    by_tag,           // a receive takes the first message from its source with its tag
    in_posting_order  // a receive takes the next message from its source; tags select nothing
};

[[nodiscard]] constexpr std::string_view to_string(message_matching m) {
    return m == message_matching::by_tag ? "by_tag" : "in_posting_order";
}

namespace detail {
template <class C>
constexpr message_matching matching_of() {
    if constexpr (requires { C::matching; })
        return C::matching;
    else
        return message_matching::by_tag;  // MPI's rule, which the concept's semantics state
}
}  // namespace detail

// A communicator's rule: its `static constexpr message_matching matching`, or by_tag when it
// declares none (the communicator concept's documented semantics).
template <class C>
inline constexpr message_matching matching_of = detail::matching_of<C>();

}  // namespace weft::comm
