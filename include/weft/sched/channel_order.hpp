// Whether a lowered program's messages pair up without tags. NCCL matches a receive with
// the next message its source sent, whatever the tag, so a communicator that works that
// way (comm::message_matching::in_posting_order) delivers the right data only if, on every
// channel, the receiver posts its RECVs in the order the sender posts its SENDs.
//
// A channel is one direction between two ranks: activations forward (SEND_F/RECV_F) or
// gradients backward (SEND_B/RECV_B). Every schedule weft ships keeps each channel in order,
// but not the two directions together: interleaved 1F1B with a micro-batch count that is
// not a multiple of the ranks, ZB-V and DualPipeV send a gradient before an activation
// that the peer receives first. So the engine gives each route (sender, receiver,
// direction) its own communicator (sched/message_channels.hpp), and runs a program over an
// untagged communicator only if this check passes.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/validate.hpp"

namespace weft::sched {

namespace detail {

// One message as the engine names it: its direction and the stage and micro-batch it is for.
struct channel_message {
    bool forward = true;
    int receiving_stage = 0;
    int microbatch = 0;
    std::size_t index = 0;  // of the SEND or RECV in its rank's row
    action posted{};

    [[nodiscard]] bool same_message(const channel_message& other) const {
        return forward == other.forward && receiving_stage == other.receiving_stage && microbatch == other.microbatch;
    }
};

// (sender rank, receiver rank, forward?) -> the messages in the order one side posts them.
using channel_posts = std::map<std::tuple<int, int, bool>, std::vector<channel_message>>;

inline std::string ordinal(std::size_t n) {
    const std::size_t k = n + 1;
    const bool teen = k % 100 >= 11 && k % 100 <= 13;
    const char* suffix = teen ? "th" : k % 10 == 1 ? "st" : k % 10 == 2 ? "nd" : k % 10 == 3 ? "rd" : "th";
    return std::to_string(k) + suffix;
}

}  // namespace detail

// For every channel, the i-th RECV the receiver posts names the message of the i-th SEND the
// sender posts. `p` must be lowered; its other properties are check()'s. The message names
// the first channel out of order and both actions.
[[nodiscard]] inline validation check_channel_order(const program& p) {
    using enum action_kind;
    if (!p.lowered) return {false, "check_channel_order needs a lowered program (sched::lower)"};
    detail::channel_posts sends, recvs;
    const auto rank_of = [&p](int stage) { return p.stage_rank[static_cast<std::size_t>(stage)]; };
    for (int r = 0; r < p.num_ranks; ++r) {
        const auto& row = p.ranks[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < row.size(); ++i) {
            const action& a = row[i];
            const auto post = [&](detail::channel_posts& to, int sender, int receiver, bool forward, int stage) {
                to[{sender, receiver, forward}].push_back({forward, stage, a.microbatch, i, a});
            };
            switch (a.kind) {
                case SEND_F: post(sends, r, rank_of(a.stage + 1), true, a.stage + 1); break;
                case SEND_B: post(sends, r, rank_of(a.stage - 1), false, a.stage - 1); break;
                case RECV_F: post(recvs, rank_of(a.stage - 1), r, true, a.stage); break;
                case RECV_B: post(recvs, rank_of(a.stage + 1), r, false, a.stage); break;
                default: break;
            }
        }
    }
    const auto describe = [](int rank, const detail::channel_message& m) {
        return detail::where(rank, m.index, m.posted);
    };
    for (const auto& [channel, sent] : sends) {
        const auto& [from, to, forward] = channel;
        const std::string name = std::string(forward ? "forward" : "backward") + " channel from rank " +
                                 std::to_string(from) + " to rank " + std::to_string(to);
        const auto it = recvs.find(channel);
        const std::size_t received = it == recvs.end() ? 0 : it->second.size();
        for (std::size_t k = 0; k < sent.size() && k < received; ++k) {
            const auto& recv = it->second[k];
            if (!sent[k].same_message(recv))
                return {false, "on the " + name + ", the " + detail::ordinal(k) + " send is " +
                                   describe(from, sent[k]) + " but the " + detail::ordinal(k) + " receive is " +
                                   describe(to, recv) +
                                   "; a communicator without tags (NCCL) would deliver one's data to the other"};
        }
        if (sent.size() != received)
            return {false, "the " + name + " has " + std::to_string(sent.size()) + " sends but " +
                               std::to_string(received) + " receives"};
    }
    for (const auto& [channel, received] : recvs)
        if (!sends.contains(channel)) {
            const auto& [from, to, forward] = channel;
            return {false, "the " + std::string(forward ? "forward" : "backward") + " channel from rank " +
                               std::to_string(from) + " to rank " + std::to_string(to) + " has " +
                               std::to_string(received.size()) + " receives but no sends"};
        }
    return {};
}

}  // namespace weft::sched
