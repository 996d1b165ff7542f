// What a SWARM socket that strangers can reach (the trainer's rendezvous, a worker's state
// server) does with messages it cannot use: each is dropped with one logged line and counted,
// and a peer that has sent `malformed_before_ban` of them is banned, its messages dropped
// unread. Members never send malformed messages, so no member is banned this way; a stall or
// a crash is what bans a member. The read loops take at most `messages_per_poll` messages at
// a time, so that a flood cannot keep them from their clocks (deadlines, heartbeats).
#pragma once

#include <cstddef>
#include <cstdio>
#include <set>
#include <string>

#include "weft/swarm/net/link.hpp"

namespace weft::swarm::net {

class peer_guard {
public:
    static constexpr std::size_t malformed_before_ban = 8;
    static constexpr int messages_per_poll = 1000;

    // `owner` names the socket's side in log lines ("swarm", "worker 3").
    explicit peer_guard(std::string owner) : owner_(std::move(owner)) {}

    // Whether `peer`'s message is to be dropped unread (counted as such).
    [[nodiscard]] bool refuses(const std::string& peer) {
        if (!banned_.contains(peer)) return false;
        dropped_.add(peer);
        return true;
    }
    // A message that could not be used: one line, counted, and the ban when it is one too many.
    void drop(const std::string& peer, const std::string& why) {
        std::fprintf(stderr, "%s: dropped a message from peer '%s': %s\n", owner_.c_str(), printable_peer(peer).c_str(),
                     why.c_str());
        dropped_.add(peer);
        ban_repeat_offenders();
    }
    // Bans the peers whose dropped messages reached the limit (those dropped for their frames
    // are counted by receive_from, through counter()).
    void ban_repeat_offenders() {
        for (const auto& [peer, count] : dropped_.by_peer)
            if (count >= malformed_before_ban && banned_.insert(peer).second)
                std::fprintf(stderr, "%s: peer '%s' banned after %zu malformed messages\n", owner_.c_str(),
                             printable_peer(peer).c_str(), count);
    }

    [[nodiscard]] dropped_messages* counter() { return &dropped_; }
    [[nodiscard]] std::size_t dropped() const { return dropped_.count; }
    [[nodiscard]] std::size_t banned() const { return banned_.size(); }

private:
    std::string owner_;
    dropped_messages dropped_;
    std::set<std::string> banned_;
};

}  // namespace weft::swarm::net
