// A peer that sends a SWARM trainer, or a worker's state server, what the protocol never does,
// for tests/swarm/bad_peer.sh: a REQ socket's framing (an empty delimiter before the body),
// multipart messages, random bytes (empty, short, and a 1 MiB frame), a hello and a state
// request cut short after their header, and kinds neither takes (welcome, stop, a call). Each burst uses fresh sockets, so every burst
// reaches the trainer's parsing before its ban on a repeating peer drops the rest unread.
//   bad_peer HOST:PORT BURSTS INTERVAL_MS
#include <zmq.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "weft/swarm/net/link.hpp"
#include "weft/swarm/wire.hpp"

namespace {

using namespace weft::swarm;

std::vector<std::byte> random_bytes(std::mt19937& rng, std::size_t n) {
    std::vector<std::byte> out(n);
    for (auto& b : out) b = static_cast<std::byte>(rng() & 0xffu);
    return out;
}

void send_frames(zmq::socket_t& socket, const std::vector<std::vector<std::byte>>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i)
        socket.send(zmq::buffer(frames[i].data(), frames[i].size()),
                    i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: bad_peer HOST:PORT BURSTS INTERVAL_MS\n");
        return 2;
    }
    const std::string endpoint = net::tcp_endpoint(argv[1], "HOST:PORT", false);
    const int bursts = std::atoi(argv[2]);
    const int interval_ms = std::atoi(argv[3]);
    std::mt19937 rng(7);
    zmq::context_t context;
    int sent = 0;
    for (int burst = 0; burst < bursts; ++burst) {
        // A REQ socket: ZeroMQ adds an empty delimiter frame. It waits for an answer that
        // never comes, so each burst's REQ is closed unanswered.
        auto req = net::make_socket(context, zmq::socket_type::req);
        req.connect(endpoint);
        req.send(zmq::buffer(std::string("hello")), zmq::send_flags::none);
        ++sent;
        auto dealer = net::make_socket(context, zmq::socket_type::dealer);
        dealer.connect(endpoint);
        send_frames(dealer, {random_bytes(rng, 8), random_bytes(rng, 8)});  // multipart
        for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{100},
                                    std::size_t{1} << 20})
            send_frames(dealer, {random_bytes(rng, n)});
        // Well-headed, wrong: a hello cut short, kinds the trainer does not take.
        for (const message_kind kind : {message_kind::hello, message_kind::state_request}) {
            message_writer truncated(kind);
            truncated.put(std::uint8_t{1});
            send_frames(dealer, {truncated.take()});
        }
        for (const message_kind kind : {message_kind::welcome, message_kind::stop, message_kind::forward}) {
            message_writer wrong(kind);
            wrong.put(std::uint64_t{12345});
            send_frames(dealer, {wrong.take()});
        }
        sent += 1 + 5 + 2 + 3;  // the multipart, the random frames, the truncated ones, the wrong kinds
        std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
    std::printf("bad_peer: sent %d malformed messages in %d bursts to %s\n", sent, bursts, argv[1]);
    return 0;
}
