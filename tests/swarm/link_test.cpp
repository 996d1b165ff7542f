// swarm/net/link.hpp against untrusted peers: a message of the wrong shape (a REQ socket's
// three frames, a stray multipart message) is read whole and dropped, so that the messages
// after it are read as sent rather than one frame off. Over ZeroMQ's inproc transport.
#include <catch2/catch.hpp>

#include <zmq.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/swarm/net/link.hpp"

namespace {

using namespace weft::swarm::net;

std::vector<std::byte> bytes_of(const std::string& text) {
    std::vector<std::byte> out;
    for (const char c : text) out.push_back(static_cast<std::byte>(c));
    return out;
}

// Waits until `socket` has a message (inproc delivery is asynchronous).
void wait_for(zmq::socket_t& socket) {
    zmq::socket_t* sockets[] = {&socket};
    REQUIRE(wait_readable(sockets, std::chrono::milliseconds(2000))[0]);
}

}  // namespace

TEST_CASE("a ROUTER drops a REQ socket's and a multipart message and reads the next as sent", "[swarm][net]") {
    zmq::context_t context;
    auto router = make_socket(context, zmq::socket_type::router);
    router.bind("inproc://link-test-router");
    auto req = make_socket(context, zmq::socket_type::req);
    req.connect("inproc://link-test-router");
    auto dealer = make_socket(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::routing_id, "good");
    dealer.connect("inproc://link-test-router");

    // REQ sends [empty delimiter, body]: the ROUTER sees three frames.
    req.send(zmq::buffer(std::string("hello")), zmq::send_flags::none);
    // A DEALER's two-frame message.
    dealer.send(zmq::buffer(std::string("a")), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(std::string("b")), zmq::send_flags::none);
    // Then the protocol's own: one frame.
    send(dealer, bytes_of("step 7"));

    dropped_messages dropped;
    std::optional<routed_message> got;
    for (int tries = 0; tries < 200 && !got; ++tries) {
        wait_for(router);
        got = receive_from(router, &dropped);
    }
    REQUIRE(got.has_value());
    CHECK(got->peer == "good");
    CHECK(got->bytes == bytes_of("step 7"));
    // The REQ's message may come after the DEALER's (a ROUTER queues its peers fairly).
    for (int tries = 0; tries < 200 && dropped.count < 2; ++tries) {
        zmq::socket_t* sockets[] = {&router};
        if (wait_readable(sockets, std::chrono::milliseconds(10))[0]) CHECK_FALSE(receive_from(router, &dropped));
    }
    CHECK(dropped.count == 2);
    CHECK(dropped.by_peer.at("good") == 1);  // the REQ's id is ZeroMQ's own
}

TEST_CASE("a DEALER drops a multipart message and reads the next as sent", "[swarm][net]") {
    zmq::context_t context;
    auto router = make_socket(context, zmq::socket_type::router);
    router.bind("inproc://link-test-dealer");
    auto dealer = make_socket(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::routing_id, "worker");
    dealer.connect("inproc://link-test-dealer");
    // The ROUTER learns the DEALER's id from its first message.
    send(dealer, bytes_of("hi"));
    wait_for(router);
    REQUIRE(receive_from(router).has_value());

    router.send(zmq::buffer(std::string("worker")), zmq::send_flags::sndmore);
    router.send(zmq::buffer(std::string("x")), zmq::send_flags::sndmore);
    router.send(zmq::buffer(std::string("y")), zmq::send_flags::none);
    REQUIRE(send_to(router, "worker", bytes_of("call 3")));

    dropped_messages dropped;
    std::optional<std::vector<std::byte>> got;
    for (int tries = 0; tries < 200 && !got; ++tries) {
        wait_for(dealer);
        got = receive(dealer, &dropped);
    }
    REQUIRE(got.has_value());
    CHECK(*got == bytes_of("call 3"));
    CHECK(dropped.count == 1);
}

TEST_CASE("a routing id is logged as it is when printable, else in hex", "[swarm][net]") {
    CHECK(printable_peer("worker-3") == "worker-3");
    CHECK(printable_peer(std::string("\0\x8b\x45", 3)) == "0x008b45");
    CHECK(printable_peer("") == "0x");
}
