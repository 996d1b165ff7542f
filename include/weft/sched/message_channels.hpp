// Which communicator each message of a lowered program travels on, when the communicator
// runs a rank's sends and receives on one stream, in order, and a send waits for its
// receive to start on the peer (comm::nccl).
//
// A route is one way between two ranks in one direction: (sender, receiver, activations
// forward or gradients backward). On such a communicator, a rank's operations on different
// routes wait for each other: a receive posted ahead of its use holds up the sends behind
// it, and a send waiting for a slow receiver holds up everything behind it. Around a ring
// (interleaved schedules), or between two ranks that send each other activations
// (V-shaped ones), that closes a cycle and the streams deadlock
// (tests/support/rendezvous_comm.hpp shows it on threads).
//
// So every route gets a stream of its own at both ends: each channel (one communicator over
// the pipeline ranks) carries at most one route per rank. On a route, messages are sent and
// received in one order (sched::check_channel_order), so its stream never waits for anything
// but its own messages, as a buffered communicator's would. Channels are assigned greedily
// over the routes in order (an edge colouring of the routes), the same on every rank;
// a linear pipeline needs 2 to 4, a V-shaped or interleaved one up to 8.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/validate.hpp"  // comm_peer_stage

namespace weft::sched {

struct message_route {
    int sender = 0;
    int receiver = 0;
    bool backward = false;  // gradients (SEND_B) rather than activations (SEND_F)
    friend auto operator<=>(const message_route&, const message_route&) = default;
};

struct message_channels {
    int count = 1;
    std::map<message_route, int> channel_of;

    // The channel of a route of the program (an error for one it does not have).
    [[nodiscard]] int of(const message_route& route) const {
        const auto it = channel_of.find(route);
        if (it == channel_of.end())
            throw error("internal: no channel for the messages from rank " + std::to_string(route.sender) +
                        " to rank " + std::to_string(route.receiver) +
                        (route.backward ? " (gradients)" : " (activations)"));
        return it->second;
    }
};

// The routes of a lowered program's SENDs.
[[nodiscard]] inline std::set<message_route> routes_of(const program& p) {
    require(p.lowered, "program", "compute-only", "message routes are those of a lowered program (sched::lower)");
    std::set<message_route> routes;
    for (std::size_t r = 0; r < p.ranks.size(); ++r)
        for (const action& a : p.ranks[r]) {
            if (a.kind != action_kind::SEND_F && a.kind != action_kind::SEND_B) continue;
            const int peer_stage = detail::comm_peer_stage(a, p.num_stages);  // a checked program's: in range
            routes.insert({static_cast<int>(r), p.stage_rank[static_cast<std::size_t>(peer_stage)],
                           a.kind == action_kind::SEND_B});
        }
    return routes;
}

// One channel per route at each rank: routes that share a rank get different channels.
[[nodiscard]] inline message_channels one_channel_per_route(const program& p) {
    message_channels out;
    std::vector<std::set<int>> ranks_on;  // per channel, the ranks a route of it touches
    for (const message_route& route : routes_of(p)) {
        std::size_t c = 0;
        while (c < ranks_on.size() && (ranks_on[c].contains(route.sender) || ranks_on[c].contains(route.receiver))) ++c;
        if (c == ranks_on.size()) ranks_on.emplace_back();
        ranks_on[c].insert({route.sender, route.receiver});
        out.channel_of[route] = static_cast<int>(c);
    }
    out.count = std::max<int>(1, static_cast<int>(ranks_on.size()));
    return out;
}

// Every route on channel 0: for a communicator that matches by tag and never makes a
// send wait for its receive.
[[nodiscard]] inline message_channels one_channel(const program& p) {
    message_channels out;
    for (const message_route& route : routes_of(p)) out.channel_of[route] = 0;
    return out;
}

}  // namespace weft::sched
