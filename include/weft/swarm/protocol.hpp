// The SWARM messages whose fields are more than a call's arguments: what a worker says when
// it arrives (hello), what the rendezvous tells it (welcome: its id and stage, the run's
// model and optimizer, the faults to play, the peers to fetch state from), and a stage's
// state manifest. Each has a write and a read over the checked wire form (swarm/wire.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weft/nn/gpt_config.hpp"
#include "weft/nn/partition.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/swarm/router.hpp"
#include "weft/swarm/state_manifest.hpp"
#include "weft/swarm/wire.hpp"
#include "weft/swarm/worker_faults.hpp"

namespace weft::swarm {

// The peer id a welcome or a rejoin gives the trainer itself when it serves a stage's state
// from a checkpoint (a resumed run): the worker fetches from it as from any peer.
inline constexpr worker_id checkpoint_peer_id = ~worker_id{0};

struct peer_address {
    worker_id id = 0;
    std::string address;  // HOST:PORT of its state server
};

struct hello_message {
    std::int64_t requested_id = -1;     // -1: any
    std::int32_t requested_stage = -1;  // -1: where the rendezvous wants
    std::string state_address;          // HOST:PORT this worker serves its state at
    std::int64_t pid = 0;
};

struct welcome_message {
    worker_id id = 0;
    std::int32_t stage = 0;
    std::int32_t stages = 1;
    std::uint64_t step = 0;
    nn::gpt_config model;
    nn::unit_range units;
    optim::optimizer_options optimizer;
    std::string init_from;  // a safetensors file the first workers load (empty: the seed's weights)
    double heartbeat_seconds = 0.5;
    double expiry_seconds = 5;
    std::uint64_t compress_block = 0;  // 0: activations travel plain
    std::uint64_t chunk_elements = 1 << 16;
    worker_faults faults;
    std::vector<peer_address> peers;  // empty: start from the initial weights (step 0 only)
};

inline void write(message_writer& w, const hello_message& m) {
    w.put(m.requested_id).put(m.requested_stage).put_string(m.state_address).put(m.pid);
}
[[nodiscard]] inline hello_message read_hello(message_reader& r) {
    hello_message m;
    m.requested_id = r.get<std::int64_t>("requested id");
    m.requested_stage = r.get<std::int32_t>("requested stage");
    m.state_address = r.get_string("state address");
    m.pid = r.get<std::int64_t>("pid");
    r.finish();
    return m;
}

inline void write_peers(message_writer& w, const std::vector<peer_address>& peers) {
    w.put(static_cast<std::uint64_t>(peers.size()));
    for (const auto& p : peers) w.put(p.id).put_string(p.address);
}
[[nodiscard]] inline std::vector<peer_address> read_peers(message_reader& r) {
    const auto n = r.get<std::uint64_t>("peer count");
    require(n <= 1 << 20, "SWARM message from " + r.sender() + ": peer count", n, "must be at most 2^20");
    std::vector<peer_address> peers;
    for (std::uint64_t i = 0; i < n; ++i) {
        peer_address p;
        p.id = r.get<worker_id>("peer id");
        p.address = r.get_string("peer address");
        peers.push_back(std::move(p));
    }
    return peers;
}

inline void write(message_writer& w, const welcome_message& m) {
    w.put(m.id).put(m.stage).put(m.stages).put(m.step);
    w.put(m.model.num_layers).put(m.model.d_model).put(m.model.num_heads).put(m.model.vocab_size);
    w.put(m.model.seq_len).put(m.model.seed);
    w.put(m.units.first).put(m.units.last);
    w.put(static_cast<std::uint8_t>(m.optimizer.kind)).put(m.optimizer.lr).put(m.optimizer.weight_decay);
    w.put(m.optimizer.momentum).put(m.optimizer.beta1).put(m.optimizer.beta2).put(m.optimizer.eps);
    w.put_string(m.init_from).put(m.heartbeat_seconds).put(m.expiry_seconds).put(m.compress_block);
    w.put(m.chunk_elements);
    w.put(m.faults.fail_step).put(static_cast<std::uint8_t>(m.faults.fail_phase)).put(m.faults.stall_step);
    w.put(m.faults.stall_seconds).put(m.faults.slow_factor);
    write_peers(w, m.peers);
}
[[nodiscard]] inline welcome_message read_welcome(message_reader& r) {
    welcome_message m;
    m.id = r.get<worker_id>("id");
    m.stage = r.get<std::int32_t>("stage");
    m.stages = r.get<std::int32_t>("stages");
    m.step = r.get<std::uint64_t>("step");
    m.model.num_layers = r.get<int>("layers");
    m.model.d_model = r.get<int>("d_model");
    m.model.num_heads = r.get<int>("heads");
    m.model.vocab_size = r.get<int>("vocab");
    m.model.seq_len = r.get<int>("seq_len");
    m.model.seed = r.get<decltype(m.model.seed)>("seed");
    m.units.first = r.get<int>("units first");
    m.units.last = r.get<int>("units last");
    const auto kind = r.get<std::uint8_t>("optimizer kind");
    require(kind <= 1, "SWARM message from " + r.sender() + ": optimizer kind", int(kind),
            "must be 0 (adamw) or 1 (sgd)");
    m.optimizer.kind = static_cast<optim::optimizer_kind>(kind);
    m.optimizer.lr = r.get<double>("lr");
    m.optimizer.weight_decay = r.get<double>("weight decay");
    m.optimizer.momentum = r.get<double>("momentum");
    m.optimizer.beta1 = r.get<double>("beta1");
    m.optimizer.beta2 = r.get<double>("beta2");
    m.optimizer.eps = r.get<double>("eps");
    m.init_from = r.get_string("init from");
    m.heartbeat_seconds = r.get<double>("heartbeat seconds");
    m.expiry_seconds = r.get<double>("expiry seconds");
    m.compress_block = r.get<std::uint64_t>("compress block");
    m.chunk_elements = r.get<std::uint64_t>("chunk elements");
    m.faults.fail_step = r.get<std::int64_t>("fail step");
    const auto phase = r.get<std::uint8_t>("fail phase");
    require(phase <= 2, "SWARM message from " + r.sender() + ": fail phase", int(phase), "must be 0, 1 or 2");
    m.faults.fail_phase = static_cast<worker_faults::phase>(phase);
    m.faults.stall_step = r.get<std::int64_t>("stall step");
    m.faults.stall_seconds = r.get<double>("stall seconds");
    m.faults.slow_factor = r.get<double>("slow factor");
    m.peers = read_peers(r);
    r.finish();
    m.model.validate();
    return m;
}

inline void write(message_writer& w, const state_manifest& m) {
    w.put(m.step).put(m.parameters).put(static_cast<std::uint64_t>(m.optimizer_tensors.size()));
    for (const auto& [name, count] : m.optimizer_tensors) w.put_string(name).put(count);
}
[[nodiscard]] inline state_manifest read_manifest(message_reader& r) {
    state_manifest m;
    m.step = r.get<std::uint64_t>("step");
    m.parameters = r.get<std::uint64_t>("parameters");
    const auto n = r.get<std::uint64_t>("optimizer tensors");
    require(n <= 64, "SWARM message from " + r.sender() + ": optimizer tensors", n, "must be at most 64");
    for (std::uint64_t i = 0; i < n; ++i) {
        std::string name = r.get_string("tensor name");
        m.optimizer_tensors.emplace_back(std::move(name), r.get<std::uint64_t>("tensor elements"));
    }
    return m;
}

}  // namespace weft::swarm
