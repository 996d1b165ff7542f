// ZeroMQ plumbing for SWARM processes: TCP endpoints from HOST:PORT, and sending and
// receiving one message of bytes on DEALER and ROUTER sockets, dropping messages of any
// other shape.
//
// Why ZeroMQ: a SWARM run must outlive any of its workers. MPI ends the whole job when one
// process dies; a ZeroMQ socket over TCP just loses that peer (its queued messages go, and a
// ROUTER with ZMQ_ROUTER_MANDATORY reports it unreachable), and the run goes on.
#pragma once

#include <zmq.hpp>

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::swarm::net {

// "tcp://HOST:PORT" from "HOST:PORT", checked: `option` names the flag in errors. Port 0
// (any free port) only where the address is bound, not connected to.
[[nodiscard]] inline std::string tcp_endpoint(std::string_view host_port, std::string_view option,
                                              bool allow_any_port) {
    const auto colon = host_port.rfind(':');
    const std::string valid = std::string("must be HOST:PORT with a port in [") + (allow_any_port ? "0" : "1") +
                              ", 65535]" + (allow_any_port ? " (0: any free port)" : "");
    if (colon == std::string_view::npos || colon == 0) throw invalid_argument(option, host_port, valid);
    int port = -1;
    const auto digits = host_port.substr(colon + 1);
    const auto [end, failure] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (failure != std::errc() || end != digits.data() + digits.size() || port < (allow_any_port ? 0 : 1) ||
        port > 65535)
        throw invalid_argument(option, host_port, valid);
    const std::string host(host_port.substr(0, colon));
    return "tcp://" + host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
}

// "HOST:PORT" of a bound socket (its last endpoint, "tcp://HOST:PORT").
[[nodiscard]] inline std::string bound_address(const zmq::socket_t& socket) {
    std::string endpoint = socket.get(zmq::sockopt::last_endpoint);
    if (endpoint.starts_with("tcp://")) endpoint.erase(0, 6);
    return endpoint;
}

// A socket that never blocks its process's exit on undelivered messages.
[[nodiscard]] inline zmq::socket_t make_socket(zmq::context_t& context, zmq::socket_type type) {
    zmq::socket_t socket(context, type);
    socket.set(zmq::sockopt::linger, 0);
    return socket;
}

// A DEALER that keeps one routing id across reconnections (`role`, then a random 64-bit
// nonce: unique to this socket, and not guessed by a stranger), so that a ROUTER with
// ZMQ_ROUTER_HANDOVER knows it again after a dropped connection instead of as a new peer.
[[nodiscard]] inline zmq::socket_t make_dealer_with_identity(zmq::context_t& context, const std::string& role) {
    zmq::socket_t socket = make_socket(context, zmq::socket_type::dealer);
    static thread_local std::mt19937_64 random{std::random_device{}()};
    char id[64];
    std::snprintf(id, sizeof id, "%s-%016llx", role.c_str(), static_cast<unsigned long long>(random()));
    socket.set(zmq::sockopt::routing_id, std::string(id));
    return socket;
}

// A message is one frame of bytes (DEALER side), or a peer's routing id then that frame
// (ROUTER side). A peer is untrusted: a message of any other shape (a REQ socket's empty
// delimiter frame before its body, or a stray multipart message) is read to its last frame,
// so that the next message starts at its own first frame rather than one place off, and is
// dropped with one logged line and counted in `dropped` (when given).
struct dropped_messages {
    std::size_t count = 0;
    std::map<std::string, std::size_t> by_peer;  // ROUTER side: by routing id
    void add(const std::string& peer) {
        ++count;
        if (!peer.empty()) ++by_peer[peer];
    }
};

// A routing id for a log line: as it is when printable (the ids weft's sockets set), else
// in hex (ZeroMQ's own ids begin with a zero byte, which would cut a C string short).
[[nodiscard]] inline std::string printable_peer(const std::string& id) {
    bool printable = !id.empty();
    for (const char c : id) printable = printable && c >= 0x20 && c < 0x7f;
    if (printable) return id;
    static constexpr char digits[] = "0123456789abcdef";
    std::string out = "0x";
    for (const char c : id) {
        const auto byte = static_cast<unsigned char>(c);
        out += digits[byte >> 4];
        out += digits[byte & 0xfu];
    }
    return out;
}

namespace detail {
// Reads the frames after the one just received, up to the message's end; how many.
inline std::size_t drain_rest(zmq::socket_t& socket, const zmq::message_t& received, zmq::message_t* last) {
    std::size_t frames = 0;
    bool more = received.more();
    zmq::message_t frame;
    while (more) {
        static_cast<void>(socket.recv(frame, zmq::recv_flags::none));  // the frames of a message arrive together
        ++frames;
        more = frame.more();
        if (last != nullptr) *last = std::move(frame);
        frame = zmq::message_t();
    }
    return frames;
}
inline void note_dropped(std::size_t frames, const std::string& from, const std::string& peer, const char* expected,
                         dropped_messages* dropped) {
    std::fprintf(stderr, "swarm: dropped a message of %zu frames from %s (expected %s)\n", frames, from.c_str(),
                 expected);
    if (dropped != nullptr) dropped->add(peer);
}
}  // namespace detail

inline void send(zmq::socket_t& socket, std::span<const std::byte> bytes) {
    socket.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
}
[[nodiscard]] inline std::optional<std::vector<std::byte>> receive(zmq::socket_t& socket,
                                                                   dropped_messages* dropped = nullptr) {
    for (;;) {
        zmq::message_t message;
        if (!socket.recv(message, zmq::recv_flags::dontwait)) return std::nullopt;
        const std::size_t more = detail::drain_rest(socket, message, nullptr);
        if (more != 0) {
            detail::note_dropped(1 + more, "the peer of a DEALER socket", "", "1", dropped);
            continue;
        }
        const auto* first = static_cast<const std::byte*>(message.data());
        return std::vector<std::byte>(first, first + message.size());
    }
}

// ROUTER side: the peer's routing id, then the frame. False when the peer is gone (the
// socket must have ZMQ_ROUTER_MANDATORY set).
[[nodiscard]] inline bool send_to(zmq::socket_t& router, const std::string& peer, std::span<const std::byte> bytes) {
    try {
        if (!router.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
        return router.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t& e) {
        if (e.num() == EHOSTUNREACH) return false;
        throw;
    }
}
struct routed_message {
    std::string peer;
    std::vector<std::byte> bytes;
};
[[nodiscard]] inline std::optional<routed_message> receive_from(zmq::socket_t& router,
                                                                dropped_messages* dropped = nullptr) {
    // Messages of the wrong shape are read and dropped, a bounded number per call: a flood of
    // them returns to the caller's clocks rather than holding it here.
    for (int skipped = 0; skipped < 1000; ++skipped) {
        zmq::message_t id;
        if (!router.recv(id, zmq::recv_flags::dontwait)) return std::nullopt;
        zmq::message_t body;
        const std::size_t frames = detail::drain_rest(router, id, &body);
        if (frames != 1) {
            detail::note_dropped(1 + frames, "peer '" + printable_peer(id.to_string()) + "'", id.to_string(),
                                 "2: a routing id and one", dropped);
            continue;
        }
        const auto* first = static_cast<const std::byte*>(body.data());
        return routed_message{id.to_string(), std::vector<std::byte>(first, first + body.size())};
    }
    return std::nullopt;
}

// Waits up to `timeout` for any of `sockets` to have a message; which ones do.
[[nodiscard]] inline std::vector<bool> wait_readable(std::span<zmq::socket_t* const> sockets,
                                                     std::chrono::milliseconds timeout) {
    std::vector<zmq::pollitem_t> items;
    for (zmq::socket_t* s : sockets) items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
    zmq::poll(items.data(), items.size(), timeout);
    std::vector<bool> ready;
    for (const auto& item : items) ready.push_back((item.revents & ZMQ_POLLIN) != 0);
    return ready;
}

}  // namespace weft::swarm::net
