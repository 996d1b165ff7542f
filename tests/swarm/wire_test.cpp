// The SWARM wire form: every field comes back as written, float arrays plain or quantized,
// and a message of the wrong size, magic, version or kind is refused naming its sender and
// the field, never read past its end.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "weft/swarm/protocol.hpp"
#include "weft/swarm/wire.hpp"

using namespace weft::swarm;

namespace {
std::vector<std::byte> sample_message(std::size_t block) {
    const std::vector<std::int32_t> tokens{1, 2, 3};
    std::vector<float> values(300);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.01f * static_cast<float>(i) - 1.0f;
    message_writer w(message_kind::backward);
    w.put(std::uint64_t{77}).put(std::int32_t{-5}).put_string("stage one").put_ints(tokens).put_floats(values, block);
    return w.take();
}
}  // namespace

TEST_CASE("fields come back in order, plain and quantized", "[swarm][wire]") {
    for (const std::size_t block : {std::size_t{0}, std::size_t{32}}) {
        const auto bytes = sample_message(block);
        message_reader r(bytes, "worker 3");
        CHECK(r.kind() == message_kind::backward);
        CHECK(r.get<std::uint64_t>("call") == 77);
        CHECK(r.get<std::int32_t>("n") == -5);
        CHECK(r.get_string("name") == "stage one");
        CHECK(r.get_ints("tokens") == std::vector<std::int32_t>{1, 2, 3});
        const auto values = r.get_floats("values");
        REQUIRE(values.size() == 300);
        for (std::size_t i = 0; i < values.size(); ++i) {
            const double exact = 0.01 * static_cast<double>(i) - 1.0;
            // plain: exact; quantized: within half a step of the block's largest magnitude (<= 2)
            CHECK(std::abs(values[i] - exact) <= (block == 0 ? 1e-6 : quantization_error_bound(2.0) * 1.0001));
        }
        CHECK_NOTHROW(r.finish());
        // The plain size is the plain message's, whichever form went on the wire.
        CHECK(r.plain_size() == sample_message(0).size());
    }
    message_writer plain(message_kind::forward), packed(message_kind::forward);
    const std::vector<float> values(4096, 0.5f);
    plain.put_floats(values);
    packed.put_floats(values, 64);
    CHECK(packed.plain_size() == plain.size());
    CHECK(packed.size() < plain.size() / 3);
}

TEST_CASE("a message of the wrong size, magic, version or kind is refused", "[swarm][wire]") {
    auto bytes = sample_message(0);
    SECTION("cut short: the field that runs past the end is named") {
        bytes.resize(bytes.size() - 10);
        message_reader r(bytes, "worker 3");
        static_cast<void>(r.get<std::uint64_t>("call"));
        static_cast<void>(r.get<std::int32_t>("n"));
        static_cast<void>(r.get_string("name"));
        static_cast<void>(r.get_ints("tokens"));
        CHECK_THROWS_WITH(r.get_floats("values"), Catch::Contains("worker 3") && Catch::Contains("'values'") &&
                                                      Catch::Contains("wrong size"));
    }
    SECTION("longer than its fields") {
        bytes.push_back(std::byte{0});
        message_reader r(bytes, "worker 3");
        static_cast<void>(r.get<std::uint64_t>("call"));
        static_cast<void>(r.get<std::int32_t>("n"));
        static_cast<void>(r.get_string("name"));
        static_cast<void>(r.get_ints("tokens"));
        static_cast<void>(r.get_floats("values"));
        CHECK_THROWS_WITH(r.finish(), Catch::Contains("must be the") && Catch::Contains("bytes its fields take"));
    }
    SECTION("a length prefix larger than the message is refused before allocating") {
        const std::uint64_t huge = std::uint64_t{1} << 60;
        std::memcpy(bytes.data() + 8 + 8 + 4, &huge, sizeof huge);  // the string's length
        message_reader r(bytes, "worker 3");
        static_cast<void>(r.get<std::uint64_t>("call"));
        static_cast<void>(r.get<std::int32_t>("n"));
        CHECK_THROWS_WITH(r.get_string("name"), Catch::Contains("'name'") && Catch::Contains("must fit"));
    }
    SECTION("another wire version") {
        const std::uint16_t version = wire_version + 1;
        std::memcpy(bytes.data() + 4, &version, sizeof version);
        CHECK_THROWS_WITH(message_reader(bytes, "peer 'x'"),
                          Catch::Contains("wire version = " + std::to_string(wire_version + 1) + " is invalid") && Catch::Contains("same weft on every host"));
    }
    SECTION("not a weft message") {
        bytes[0] = std::byte{0};
        CHECK_THROWS_WITH(message_reader(bytes, "peer 'x'"), Catch::Contains("is not a weft SWARM message"));
    }
    SECTION("an unknown kind") {
        const std::uint16_t kind = 999;
        std::memcpy(bytes.data() + 6, &kind, sizeof kind);
        CHECK_THROWS_WITH(message_reader(bytes, "peer 'x'"), Catch::Contains("its kind = 999 is invalid"));
    }
    SECTION("shorter than the header") {
        bytes.resize(5);
        CHECK_THROWS_WITH(message_reader(bytes, "peer 'x'"), Catch::Contains("at least the 8-byte header"));
    }
}

TEST_CASE("a welcome round-trips with its settings, faults and peers", "[swarm][wire]") {
    welcome_message m;
    m.id = 7;
    m.stage = 1;
    m.stages = 3;
    m.step = 12;
    m.model = {.num_layers = 2, .d_model = 32, .num_heads = 2, .vocab_size = 256, .seq_len = 16, .seed = 9};
    m.units = {2, 3};
    m.optimizer.lr = 0.01;
    m.optimizer.weight_decay = 0.1;
    m.init_from = "init.safetensors";
    m.compress_block = 64;
    m.faults.fail_step = 4;
    m.faults.fail_phase = worker_faults::phase::backward;
    m.faults.slow_factor = 2.5;
    m.peers = {{3, "10.0.0.2:4000"}, {5, "10.0.0.3:4001"}};
    message_writer w(message_kind::welcome);
    write(w, m);
    const auto bytes = w.take();
    message_reader r(bytes, "the rendezvous");
    const welcome_message back = read_welcome(r);
    CHECK(back.id == 7);
    CHECK(back.stage == 1);
    CHECK(back.step == 12);
    CHECK(back.model.seed == 9);
    CHECK(back.units == weft::nn::unit_range{2, 3});
    CHECK(back.optimizer.weight_decay == 0.1);
    CHECK(back.init_from == "init.safetensors");
    CHECK(back.compress_block == 64);
    CHECK(back.faults.fail_step == 4);
    CHECK(back.faults.fail_phase == worker_faults::phase::backward);
    CHECK(back.faults.slow_factor == 2.5);
    REQUIRE(back.peers.size() == 2);
    CHECK(back.peers[1].address == "10.0.0.3:4001");
}
