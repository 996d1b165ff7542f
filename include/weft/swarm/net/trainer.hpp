// The SWARM trainer: the rendezvous its workers announce themselves to, and the loop that
// drives each global batch through the stages' pools of workers.
//
// A step:
//  1. Every micro-batch goes forward stage by stage and back again, each call to the worker
//     of that stage its router picks (interleaved weighted round-robin, swarm/router.hpp). The
//     trainer keeps every stage's input and output gradient of the step, so a call that times
//     out, is refused or dies with its worker is sent again elsewhere, up to a retry cap. The
//     last stage's call is forward, loss and backward at once.
//  2. The trainer records which worker's backward it accepted for each (stage, micro-batch),
//     and collects from each worker the sum of exactly those contributions. A worker that
//     cannot hand them over (it died) has those backwards redone by another worker of its
//     stage, from the kept inputs. Each sample thus counts exactly once.
//  3. The stage's gradient is the sum of what was collected (each micro-batch's loss was
//     scaled by its share of the batch's samples), the tied wte gradient is summed across
//     the first and last stages, the global norm is clipped once, and every live worker of
//     the stage steps its optimizer with that one gradient, so they stay identical.
//
// Membership: a worker says hello, gets a welcome (id, stage, settings, peers), fetches its
// state and says ready; from then on its heartbeats keep it a member. A worker that misses
// heartbeats past the expiry, or whose connection is gone, is banned from its router until
// it announces itself again. A worker without a wish joins the most loaded stage, and every
// rebalancing period one worker may move there from a least loaded one (swarm/rebalancer.hpp):
// between steps, it leaves its router and fetches its new stage's state from that stage's
// peers, as a joining worker does.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/token_batches.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/gpt.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/swarm/net/link.hpp"
#include "weft/swarm/net/peer_guard.hpp"
#include "weft/swarm/net/state_server.hpp"
#include "weft/swarm/checkpoint.hpp"
#include "weft/swarm/coordinator.hpp"
#include "weft/swarm/protocol.hpp"
#include "weft/swarm/stage_service.hpp"
#include "weft/swarm/wire.hpp"
#include "weft/train/grad_norm.hpp"

namespace weft::swarm::net {

struct trainer_options {
    nn::gpt_config model;
    int stages = 2;
    std::vector<int> partition;  // units per stage; empty: balanced by cost
    int batch = 8;
    int microbatches = 4;
    // Micro-batches going at once (0: all of the step's). Sent all at once, they queue at
    // the first stage's workers ahead of the backwards, and a worker that leaves takes more
    // calls with it (bench_swarm measures the difference).
    int max_in_flight = 0;
    optim::optimizer_options optimizer;
    double grad_clip = 0;  // 0: no clipping
    std::string init_from;
    std::string listen = "127.0.0.1:0";  // HOST:PORT the rendezvous binds (port 0: any free one)
    double heartbeat_seconds = 0.25;
    int missed_heartbeats = 12;  // a worker silent this many intervals expires
    router_options routing{.ema_weight = 0.2, .initial_seconds = 0.5, .timeout_multiple = 8,
                           .timeout_floor_seconds = 2, .timeout_penalty = 2};
    std::uint64_t seed = 0;
    int max_attempts = 8;                  // sends of one call before the step fails
    double wait_for_worker_seconds = 30;   // a call waits this long for a live worker of its stage
    std::uint64_t compress_block = 0;      // 0: activations and their gradients travel plain
    std::uint64_t chunk_elements = 1 << 16;
    std::map<std::int64_t, worker_faults> faults;  // by worker id
    double rebalance_seconds = 0;                  // 0: workers never move between stages
    // The steps' averaged gradients kept, so that a worker whose fetched state is that many
    // steps old catches up by replaying them rather than fetching again.
    int catch_up_steps = 4;
    rebalance_options rebalancing;
};

struct step_result {
    long long step = 0;
    double loss = 0;
    long long samples = 0;  // samples whose gradient was counted, once each, at every stage
    double seconds = 0;
    double grad_norm = 0;
    std::vector<std::set<worker_id>> served;  // per stage: workers whose answers were used
    long long retried_calls = 0;              // calls sent again after a timeout, refusal or death
    long long late_replies = 0;               // answers to calls already given up on (ignored)
    long long dropped_messages = 0;           // malformed messages from peers (dropped, each logged)
    double wire_bytes_per_microbatch = 0;     // activations and their gradients, both ways
    double plain_bytes_per_microbatch = 0;    // what they take uncompressed
    std::optional<worker_move> moved;         // after the step, a worker sent to another stage
};

// One line of the membership, for the end-of-run table.
struct member_summary {
    worker_id id = 0;
    int stage = 0;
    bool live = false;
    long long calls = 0;
    long long timeouts = 0;
    long long deaths = 0;
    std::string address;  // HOST:PORT it serves state (and redirects newcomers) at
};

// A rejoin: the member fetches stage `stage`'s state (units [first, last)) at `step` from `peers`.
// Built out of line: GCC 12 inlines the writer's growth into the loop that sends it and then
// misreads a resize as an overflow (-Warray-bounds, a false positive).
[[gnu::noinline]] inline std::vector<std::byte> rejoin_message(int stage, int first, int last, std::uint64_t step,
                                                               const std::vector<peer_address>& peers) {
    message_writer w(message_kind::rejoin);
    w.put(static_cast<std::int32_t>(stage)).put(first).put(last).put(step);
    write_peers(w, peers);
    return w.take();
}

// A stage lost every worker, and with them its state: the step cannot finish, and the run
// can go on only from a checkpoint (trainer::restore) or from the start (restart_from_start).
struct stage_lost : error {
    stage_lost(int lost_stage, std::uint64_t at_step)
        : error("stage " + std::to_string(lost_stage) + " lost every worker at step " + std::to_string(at_step) +
                ": no one holds its state any more"),
          stage(lost_stage),
          step(at_step) {}
    int stage;
    std::uint64_t step;
};

class trainer {
public:
    explicit trainer(trainer_options options)
        : options_(std::move(options)),
          units_(swarm_stage_units(options_.model, options_.stages, options_.partition)),
          policy_(coordinator_options{.stages = options_.stages,
                                      .microbatches = options_.microbatches,
                                      .max_in_flight = options_.max_in_flight,
                                      .max_attempts = options_.max_attempts,
                                      .catch_up_steps = options_.catch_up_steps,
                                      // A worker replaying steps is in no router: its calls get the expiry.
                                      .catch_up_timeout_seconds = expiry_seconds(),
                                      .routing = routing_rule::iwrr,
                                      .router = options_.routing,
                                      .rebalancing = options_.rebalancing,
                                      .seed = options_.seed}),
          router_socket_(make_socket(context_, zmq::socket_type::router)) {
        require(options_.batch % options_.microbatches == 0, "--batch", options_.batch,
                "must be a multiple of --microbatches " + std::to_string(options_.microbatches));
        require(options_.heartbeat_seconds > 0, "--heartbeat-s", options_.heartbeat_seconds, "must be > 0");
        require(options_.wait_for_worker_seconds >= 0, "--wait-s", options_.wait_for_worker_seconds, "must be >= 0");
        router_socket_.set(zmq::sockopt::router_mandatory, 1);
        // A worker that reconnects (a dropped connection) comes back under its routing id.
        router_socket_.set(zmq::sockopt::router_handover, 1);
        router_socket_.bind(tcp_endpoint(options_.listen, "--listen", true));
        for (int k = 0; k < options_.stages; ++k) {
            registries_.push_back(nn::gpt_stage<exec::cpu>::layout(options_.model, units_[std::size_t(k)]));
            norm_runs_.push_back(train::norm_counted_runs(registries_.back(), k, 0, tied_, units_));
        }
    }

    // HOST:PORT workers reach the rendezvous at.
    [[nodiscard]] std::string address() const { return bound_address(router_socket_); }
    [[nodiscard]] std::uint64_t step_index() const { return policy_.step(); }
    [[nodiscard]] const std::vector<nn::unit_range>& stage_units() const { return units_; }

    // Serves the rendezvous until worker `id` is ready (it joined, and fetched its state).
    void wait_for_worker(worker_id id, double seconds) {
        serve_until(seconds, [&]() -> std::string {
            const member_state* m = policy_.member(id);
            if (m != nullptr && m->live && m->ready) return {};
            return "worker " + std::to_string(id) + " did not become ready within " + std::to_string(seconds) +
                   " s (--wait-s)";
        });
    }

    // Serves the rendezvous until every stage has `per_stage` workers ready.
    void wait_for_workers(int per_stage, double seconds) {
        serve_until(seconds, [&]() -> std::string {
            std::string short_stages;
            for (int k = 0; k < options_.stages; ++k)
                if (policy_.ready_count(k) < per_stage)
                    short_stages += " stage " + std::to_string(k) + " has " + std::to_string(policy_.ready_count(k)) + ";";
            if (short_stages.empty()) return {};
            return "workers did not arrive: after " + std::to_string(seconds) + " s," + short_stages +
                   " each stage needs " + std::to_string(per_stage) + " (workers join with --role worker "
                   "--rendezvous " + address() + ")";
        });
    }

    // One global batch: every sample counted once, every stage stepped once.
    step_result step(const data::token_batch& batch, double lr) {
        require(batch.rows == options_.batch, "batch rows", batch.rows,
                "must equal --batch " + std::to_string(options_.batch));
        const auto started = clock::now();
        const std::uint64_t step = policy_.step();
        tensors_ = step_tensors(options_.microbatches, options_.stages);
        tensors_.batch = &batch;
        tensors_.rows = batch.rows / options_.microbatches;
        result_ = step_result{};
        result_.step = static_cast<long long>(step);
        dropped_before_step_ = guard_.dropped();
        result_.served.resize(std::size_t(options_.stages));
        policy_.begin_step();
        drive_until(step_phase::summed);
        applying_.step = step;
        applying_.gradients = summed_gradients();
        sum_tied_gradients(applying_.gradients);
        double squares = 0;
        for (int k = 0; k < options_.stages; ++k)
            squares += train::counted_sum_of_squares<float>(applying_.gradients[std::size_t(k)], 0,
                                                            norm_runs_[std::size_t(k)]);
        double loss = 0;
        for (const double l : tensors_.loss) loss += l;
        loss /= options_.microbatches;
        result_.grad_norm = std::sqrt(squares);
        if (!std::isfinite(loss) || !std::isfinite(result_.grad_norm))
            throw error("step " + std::to_string(step) + " is not finite (loss " + std::to_string(loss) +
                        ", gradient norm " + std::to_string(result_.grad_norm) +
                        "); it was not applied: lower --lr or check the data");
        applying_.lr = lr;
        applying_.clip = train::clip_coefficient(options_.grad_clip, result_.grad_norm);
        policy_.begin_apply();
        drive_until(step_phase::applied);
        if (const auto k = policy_.stage_without_apply()) throw stage_lost(*k, step);
        policy_.end_step();
        if (!policy_.restorable()) {  // past the checkpoint the run restarted from: workers hold the state
            restored_.clear();
            restored_servers_.clear();
        }
        // The steps a behind worker may replay, as the policy keeps them.
        history_.emplace(step, std::move(applying_));
        const auto& kept = policy_.kept_steps();
        while (!history_.empty() && (kept.empty() || history_.begin()->first < kept.front()))
            history_.erase(history_.begin());
        result_.loss = loss;
        result_.samples = static_cast<long long>(tensors_.rows) * options_.microbatches;
        result_.retried_calls = policy_.counts().retried_calls;
        result_.late_replies = policy_.counts().late_replies;
        result_.wire_bytes_per_microbatch = static_cast<double>(wire_bytes_) / options_.microbatches;
        result_.plain_bytes_per_microbatch = static_cast<double>(plain_bytes_) / options_.microbatches;
        wire_bytes_ = plain_bytes_ = 0;
        send_orders();  // the lost and the behind: sent for their state, or replaying this step
        result_.moved = rebalance();
        result_.seconds = std::chrono::duration<double>(clock::now() - started).count();
        return result_;
    }

    // The run goes on from a checkpoint (`restored`, swarm/checkpoint.hpp): the next step is
    // its step, and until every stage has a worker again the trainer serves the checkpoint's
    // state to the workers that fetch it (as a peer, at its own address).
    void restore(swarm_restore restored) {
        require(restored.stages.size() == std::size_t(options_.stages), "checkpoint stages", restored.stages.size(),
                "must be this run's --stages " + std::to_string(options_.stages));
        restored_ = std::move(restored.stages);
        restored_servers_.assign(restored_.size(), state_image_server{});
        restart_at(restored.manifest.step);
    }
    // The run goes back to step 0 (the initial weights): what a run that lost a stage before
    // its first checkpoint can do.
    void restart_from_start() {
        restored_.clear();
        restored_servers_.clear();
        restart_at(0);
    }

    // Fetches every stage's state from one of its workers (or, right after a restore, from the
    // checkpoint it serves) and writes it as root/step-<n> (swarm/checkpoint.hpp).
    train::checkpoint_saved save_checkpoint(const std::filesystem::path& root, const nlohmann::json& run, int keep) {
        require(policy_.phase() == step_phase::between_steps, "save_checkpoint", "mid-step", "must come between steps");
        std::vector<stage_image> images;
        int workers = 0;
        for (const auto& [id, m] : policy_.members()) workers += (m.live && m.ready) ? 1 : 0;
        for (int k = 0; k < options_.stages; ++k) images.push_back(fetch_stage_image(k));
        const swarm_checkpoint_run about{.model = options_.model, .units = units_, .optimizer = options_.optimizer,
                                         .microbatches = options_.microbatches, .workers = workers, .run = run};
        return save_swarm_checkpoint(root, images, about, policy_.step() * std::uint64_t(options_.batch), keep);
    }

    // Tells every member the run is over.
    void stop_workers() {
        for (const auto& [id, link] : links_) {
            message_writer w(message_kind::stop);
            static_cast<void>(send_to(router_socket_, link.peer, w.take()));
        }
        // Let the messages leave before the socket closes (linger is 0).
        pump(std::chrono::milliseconds(100));
    }

    [[nodiscard]] std::vector<member_summary> members() const {
        std::vector<member_summary> out;
        for (const auto& [id, m] : policy_.members())
            out.push_back({id, m.stage, m.live && m.ready, m.calls, m.timeouts, m.deaths, links_.at(id).state_address});
        return out;
    }

private:
    using clock = std::chrono::steady_clock;

    // How a member is reached: the routing ids of its two sockets, and its state server.
    struct member_link {
        std::string peer;           // its call socket: hello, ready and every reply come from it
        std::string beat_peer;      // its heartbeat socket, bound at its first heartbeat
        std::string state_address;  // HOST:PORT of its state server
        clock::time_point heard;
    };

    // The step's tensors, which the policy's calls name by (micro-batch, stage).
    struct step_tensors {
        step_tensors() = default;
        step_tensors(int microbatches, int stages)
            : inputs(std::size_t(microbatches), std::vector<std::vector<float>>(std::size_t(stages))),
              grad_outputs(std::size_t(microbatches), std::vector<std::vector<float>>(std::size_t(stages))),
              loss(std::size_t(microbatches), 0.0) {}
        const data::token_batch* batch = nullptr;
        int rows = 0;
        std::vector<std::vector<std::vector<float>>> inputs;        // [mb][stage], stage >= 1
        std::vector<std::vector<std::vector<float>>> grad_outputs;  // [mb][stage], stage < last
        std::vector<double> loss;
        std::map<std::pair<int, int>, std::vector<float>> partials;  // (stage, first mb) -> collected sum
    };
    // A step's averaged gradients as applied: what a behind worker replays.
    struct applied_step {
        std::uint64_t step = 0;
        double lr = 0, clip = 1;
        std::vector<std::vector<float>> gradients;  // per stage
    };

    // Pumps messages until `unmet()` gives an empty string; past `seconds`, throws what it gives.
    template <class Unmet>
    void serve_until(double seconds, Unmet unmet) {
        const auto deadline = clock::now() + std::chrono::duration<double>(seconds);
        while (true) {
            pump(std::chrono::milliseconds(5));
            send_orders();
            std::string why = unmet();
            if (why.empty()) return;
            if (clock::now() > deadline) throw error(why);
        }
    }
    void restart_at(std::uint64_t step) {
        policy_.restart_at(step);  // a step under way is abandoned: its calls are awaited no more
        history_.clear();
        starving_since_.clear();
        send_orders();  // every member fetches its stage's state again
    }
    // Sends what the policy asks for and serves the rendezvous until the step reaches `phase`;
    // a stage with work and no live worker for --wait-s ends the run.
    void drive_until(step_phase phase) {
        while (true) {
            send_orders();
            if (policy_.phase() == phase) return;
            pump(std::chrono::milliseconds(5));
            check_starved_stages();
        }
    }
    void check_starved_stages() {
        const auto now = clock::now();
        const auto starved = policy_.starved_stages();
        for (auto it = starving_since_.begin(); it != starving_since_.end();)
            it = std::find(starved.begin(), starved.end(), it->first) == starved.end() ? starving_since_.erase(it)
                                                                                         : std::next(it);
        for (const int k : starved) {
            // No worker holds the stage's state, and none can fetch it: waiting is no use.
            if (!policy_.has_state_to_fetch(k)) throw stage_lost(k, policy_.step());
            const auto since = starving_since_.try_emplace(k, now).first->second;
            if (now - since > std::chrono::duration<double>(options_.wait_for_worker_seconds))
                throw error("stage " + std::to_string(k) + " has no live worker: none answered within --wait-s " +
                            std::to_string(options_.wait_for_worker_seconds) + " s (" +
                            std::to_string(policy_.members().size()) +
                            " workers ever joined); start workers with --role worker --rendezvous " + address());
        }
    }

    [[nodiscard]] double expiry_seconds() const { return options_.heartbeat_seconds * options_.missed_heartbeats; }
    [[nodiscard]] bool is_last(int stage) const { return stage == options_.stages - 1; }
    [[nodiscard]] std::size_t activation_size() const {
        return static_cast<std::size_t>(tensors_.rows) * std::size_t(options_.model.seq_len) *
               std::size_t(options_.model.d_model);
    }

    // ---- membership --------------------------------------------------------------------
    void on_hello(const std::string& peer, message_reader& r) {
        const hello_message hello = read_hello(r);
        worker_id id = next_id_;
        if (hello.requested_id >= 0) {
            id = static_cast<worker_id>(hello.requested_id);
            const member_state* m = policy_.member(id);
            if (m != nullptr && m->live && links_.at(id).peer != peer) {
                std::fprintf(stderr, "swarm: a second worker asked for id %llu, which is live; it gets %llu\n",
                             static_cast<unsigned long long>(id), static_cast<unsigned long long>(next_id_));
                id = next_id_;
            }
        }
        next_id_ = std::max(next_id_, id + 1);
        const int stage = policy_.admit(id, hello.requested_stage);
        links_[id] = member_link{.peer = peer, .beat_peer = {}, .state_address = hello.state_address,
                                 .heard = clock::now()};
        welcome_message w{.id = id, .stage = stage, .stages = options_.stages, .step = policy_.step(),
                          .model = options_.model, .units = units_[std::size_t(stage)], .optimizer = options_.optimizer,
                          .init_from = options_.init_from, .heartbeat_seconds = options_.heartbeat_seconds,
                          .expiry_seconds = expiry_seconds(), .compress_block = options_.compress_block,
                          .chunk_elements = options_.chunk_elements, .faults = {}, .peers = peers_of(stage, id)};
        if (auto f = options_.faults.find(static_cast<std::int64_t>(id)); f != options_.faults.end()) w.faults = f->second;
        message_writer out(message_kind::welcome);
        write(out, w);
        if (!send_to(router_socket_, peer, out.take())) fail_worker(id, "its connection is gone");
    }
    [[nodiscard]] std::vector<peer_address> peers_of(int stage, worker_id except) const {
        std::vector<peer_address> peers;
        for (const worker_id id : policy_.state_holders(stage, except)) peers.push_back({id, links_.at(id).state_address});
        // No worker holds it: the checkpoint the run restarted from does, served here.
        if (peers.empty() && serving_checkpoint()) peers.push_back({checkpoint_peer_id, address()});
        return peers;
    }
    [[nodiscard]] bool serving_checkpoint() const { return !restored_.empty() && policy_.restorable(); }
    // A worker fetching its stage's state from the checkpoint this trainer serves.
    void on_state_request(const std::string& peer, message_reader& r) {
        const state_request q = read_state_request(r);
        std::vector<std::byte> reply;
        if (!serving_checkpoint()) {
            reply = refusal(policy_.step(), "the trainer serves no checkpoint at step " + std::to_string(policy_.step()));
        } else if (q.stage < 0 || q.stage >= options_.stages) {
            reply = refusal(policy_.step(), "state request stage " + std::to_string(q.stage) + " is not a stage of this run");
        } else {
            const auto k = std::size_t(q.stage);
            reply = restored_servers_[k].answer(*restored_[k], q);
        }
        static_cast<void>(send_to(router_socket_, peer, reply));
    }
    // One stage's state image for a checkpoint: from a worker that holds this step's, over its
    // state server (manifest, then chunks), pumping the rendezvous between the replies so the
    // members' heartbeats are answered; or from the checkpoint this trainer serves.
    stage_image fetch_stage_image(int stage) {
        std::string failures;
        for (const worker_id id : policy_.state_holders(stage, checkpoint_peer_id)) {
            const member_state* m = policy_.member(id);
            if (m == nullptr || m->step != policy_.step()) continue;
            try {
                return fetch_image_from(links_.at(id).state_address, stage);
            } catch (const error& e) {
                failures += " worker " + std::to_string(id) + ": " + e.what() + ";";
            }
        }
        if (serving_checkpoint()) {
            const stage_service& service = *restored_[std::size_t(stage)];
            const state_manifest m = service.manifest();
            return {m, service.read_state(0, m.total())};
        }
        throw error("checkpoint: no worker of stage " + std::to_string(stage) + " handed out its state of step " +
                    std::to_string(policy_.step()) + (failures.empty() ? std::string(" (none holds it)") : ":" + failures));
    }
    stage_image fetch_image_from(const std::string& state_address, int stage) {
        zmq::socket_t link = make_socket(context_, zmq::socket_type::dealer);
        link.connect(tcp_endpoint(state_address, "worker state address", false));
        const auto ask = [&](const state_request& q) {
            send(link, write_state_request(q));
            const auto deadline = clock::now() + std::chrono::duration<double>(expiry_seconds());
            while (clock::now() < deadline) {
                zmq::socket_t* sockets[] = {&link};
                if (wait_readable(sockets, std::chrono::milliseconds(2))[0])
                    if (auto bytes = receive(link)) return std::move(*bytes);
                pump(std::chrono::milliseconds(0));
            }
            throw error("no answer within " + std::to_string(expiry_seconds()) + " s");
        };
        const auto manifest_bytes = ask({.stage = stage, .step = 0, .offset = 0, .count = 0});
        message_reader mr(manifest_bytes, "worker state server " + state_address);
        if (mr.kind() != message_kind::state_reply) throw error("it refused");
        stage_image image{read_manifest(mr), {}};
        mr.finish();
        const std::uint64_t total = image.manifest.total(), chunk = std::max<std::uint64_t>(1, options_.chunk_elements);
        image.values.reserve(total);
        for (std::uint64_t at = 0; at < total; at += chunk) {
            const auto bytes = ask({.stage = stage, .step = image.manifest.step, .offset = at,
                                    .count = std::min(chunk, total - at)});
            message_reader r(bytes, "worker state server " + state_address);
            if (r.kind() != message_kind::state_reply) throw error("it refused a chunk");
            require(r.get<std::uint64_t>("step") == image.manifest.step, "state chunk step", "another",
                    "must be the manifest's");
            require(r.get<std::uint64_t>("offset") == at, "state chunk offset", "another", "must be the one asked for");
            const auto values = r.get_floats("state");
            r.finish();
            require(values.size() == std::min(chunk, total - at), "state chunk values", values.size(),
                    "must be the count asked for");
            image.values.insert(image.values.end(), values.begin(), values.end());
        }
        return image;
    }
    // The member whose call socket `peer` is; a stranger's claim to be one is refused.
    member_link& link_of(worker_id id, const std::string& peer, const char* what) {
        const auto it = links_.find(id);
        if (it == links_.end()) throw invalid_argument(what, id, "names no member");
        if (it->second.peer != peer)
            throw invalid_argument(what, id, "came from peer '" + printable_peer(peer) + "', not from that worker's");
        return it->second;
    }
    void on_ready(const std::string& peer, message_reader& r) {
        const auto id = r.get<worker_id>("id");
        const auto step = r.get<std::uint64_t>("step");
        r.finish();
        link_of(id, peer, "ready from worker").heard = clock::now();
        policy_.reachable(id);
        policy_.ready(id, step);
    }
    void on_heartbeat(const std::string& peer, message_reader& r) {
        const auto id = r.get<worker_id>("id");
        static_cast<void>(r.get<std::uint64_t>("step"));
        r.finish();
        const auto it = links_.find(id);
        if (it == links_.end()) return;  // a worker of an earlier run, or not welcomed yet
        member_link& link = it->second;
        if (link.beat_peer.empty()) link.beat_peer = peer;
        if (link.beat_peer != peer)
            throw invalid_argument("heartbeat of worker", id,
                                   "came from peer '" + printable_peer(peer) + "', not from that worker's heartbeat");
        static_cast<void>(send_to(router_socket_, peer, message_writer(message_kind::heartbeat_ack).take()));
        link.heard = clock::now();
        policy_.heard_again(id);  // one given up on fetches its state anew
        policy_.reachable(id);    // one whose connection dropped takes calls again
    }
    void fail_worker(worker_id id, const std::string& why) {
        if (!policy_.failed(id)) return;
        std::fprintf(stderr, "swarm: worker %llu of stage %d banned: %s\n", static_cast<unsigned long long>(id),
                     policy_.member(id)->stage, why.c_str());
    }
    // A member fetches its stage's state again (on a move: the new stage's).
    void send_rejoin(worker_id id) {
        const member_state* m = policy_.member(id);
        if (m == nullptr || !m->live) return;
        const auto units = units_[std::size_t(m->stage)];
        const std::vector<std::byte> bytes = rejoin_message(m->stage, units.first, units.last, policy_.step(),
                                                      peers_of(m->stage, id));
        if (!send_to(router_socket_, links_.at(id).peer, bytes)) fail_worker(id, "its connection is gone");
    }
    // Every --rebalance-s, between steps: at most one worker moves to the most loaded stage.
    std::optional<worker_move> rebalance() {
        if (options_.rebalance_seconds <= 0) return std::nullopt;
        const auto now = clock::now();
        if (!last_rebalance_) last_rebalance_ = now;
        if (now - *last_rebalance_ < std::chrono::duration<double>(options_.rebalance_seconds)) return std::nullopt;
        if (policy_.anyone_joining()) return std::nullopt;
        last_rebalance_ = now;
        const auto move = policy_.rebalance();
        send_orders();  // the moved worker fetches its new stage's state
        return move;
    }

    // ---- the policy's orders -----------------------------------------------------------
    // Sends the calls and rejoins the policy asks for, until it asks for none; a worker that
    // cannot be reached fails (and its calls go elsewhere).
    void send_orders() {
        while (true) {
            auto calls = policy_.take_calls();
            const auto rejoins = policy_.take_rejoins();
            if (calls.empty() && rejoins.empty()) return;
            for (const worker_id id : rejoins) send_rejoin(id);
            for (const call& c : calls)
                if (policy_.awaited(c.id) != nullptr) send_call(c);
        }
    }
    void send_call(const call& c) {
        message_writer w = call_message(c);
        if (c.kind == call_kind::forward || c.kind == call_kind::backward) {
            wire_bytes_ += w.size();
            plain_bytes_ += w.plain_size();
        }
        if (!send_to(router_socket_, links_.at(c.worker).peer, w.take())) {
            // A dropped connection is not a death: the worker reconnects (its sockets keep their
            // routing ids), and if it is really gone its heartbeats stop and it is banned then.
            std::fprintf(stderr, "swarm: worker %llu unreachable (its connection dropped): its calls go elsewhere "
                                 "until it is heard from again\n",
                         static_cast<unsigned long long>(c.worker));
            policy_.unreachable(c.worker);
            return;
        }
        deadlines_[c.id] = clock::now() + std::chrono::duration_cast<clock::duration>(
                                              std::chrono::duration<double>(c.due_after_seconds));
    }
    message_writer call_message(const call& c) const {
        switch (c.kind) {
            case call_kind::forward:
            case call_kind::backward: return compute_message(c);
            case call_kind::collect: {
                message_writer w(message_kind::collect);
                w.put(c.id).put(c.step).put_ints(c.microbatches);
                return w;
            }
            case call_kind::apply:
            case call_kind::catch_up: {
                const applied_step& h = c.kind == call_kind::apply ? applying_ : history_.at(c.step);
                message_writer w(message_kind::apply);
                w.put(c.id).put(h.step).put(h.lr).put(h.clip).put_floats(h.gradients[std::size_t(c.stage)]);
                return w;
            }
        }
        throw error("swarm: a call of an unknown kind");
    }
    // F or B of a micro-batch at a stage: the kept input, and the output gradient or the targets.
    message_writer compute_message(const call& c) const {
        const bool backward = c.kind == call_kind::backward;
        const int mb = c.microbatch, stage = c.stage;
        message_writer w(backward ? message_kind::backward : message_kind::forward);
        w.put(c.id).put(c.step);
        if (backward) w.put(static_cast<std::int32_t>(mb));
        const auto block = options_.compress_block;
        w.put(static_cast<std::int32_t>(tensors_.rows));
        const data::token_batch_view rows = data::micro_batch(*tensors_.batch, mb, options_.microbatches);
        w.put_ints(stage == 0 ? rows.inputs : std::span<const std::int32_t>());
        w.put_floats(tensors_.inputs[std::size_t(mb)][std::size_t(stage)], block);
        if (backward) {
            w.put_floats(tensors_.grad_outputs[std::size_t(mb)][std::size_t(stage)], block);
            w.put_ints(is_last(stage) ? rows.targets : std::span<const std::int32_t>());
            w.put(static_cast<double>(tensors_.rows) / options_.batch);  // the micro-batch's share of the samples
        }
        return w;
    }

    // ---- the event loop ----------------------------------------------------------------
    // Waits up to `wait` for messages, handles them, then expires silent members and
    // overdue calls.
    void pump(std::chrono::milliseconds wait) {
        zmq::socket_t* sockets[] = {&router_socket_};
        if (wait_readable(sockets, wait)[0]) {
            for (int n = 0; n < peer_guard::messages_per_poll; ++n) {
                auto m = receive_from(router_socket_, guard_.counter());
                if (!m) break;
                if (!guard_.refuses(m->peer)) dispatch(*m);
            }
            guard_.ban_repeat_offenders();  // a peer whose messages were all of the wrong shape
        }
        result_.dropped_messages = static_cast<long long>(guard_.dropped() - dropped_before_step_);
        const auto now = clock::now();
        for (const auto& [id, link] : links_) {
            const member_state* m = policy_.member(id);
            if (m != nullptr && m->live && now - link.heard > std::chrono::duration<double>(expiry_seconds()))
                fail_worker(id, "no heartbeat for " + std::to_string(expiry_seconds()) + " s");
        }
        std::vector<std::uint64_t> overdue;
        for (auto it = deadlines_.begin(); it != deadlines_.end();) {
            if (policy_.awaited(it->first) == nullptr) {
                it = deadlines_.erase(it);  // answered, or lost with its worker
            } else if (now > it->second) {
                overdue.push_back(it->first);
                it = deadlines_.erase(it);
            } else {
                ++it;
            }
        }
        for (const std::uint64_t id : overdue) policy_.timed_out(id);
    }
    void dispatch(const routed_message& message) {
        try {
            message_reader r(message.bytes, "peer '" + printable_peer(message.peer) + "'");
            switch (r.kind()) {
                case message_kind::hello: on_hello(message.peer, r); return;
                case message_kind::ready: on_ready(message.peer, r); return;
                case message_kind::heartbeat: on_heartbeat(message.peer, r); return;
                case message_kind::state_request: on_state_request(message.peer, r); return;
                case message_kind::forward_reply:
                case message_kind::backward_reply:
                case message_kind::collect_reply:
                case message_kind::apply_reply:
                case message_kind::refused: on_reply(r, message); return;
                default:
                    throw invalid_argument("message kind", std::string(to_string(r.kind())),
                                           "the trainer takes hello, ready, heartbeat, state requests and call replies");
            }
        } catch (const std::exception& e) {
            // A malformed message costs that message, not the run (std::exception: contents
            // that name no known member or call are refused as well as bytes that do not parse).
            // A reply dropped so leaves its call awaited: it times out and goes elsewhere.
            guard_.drop(message.peer, e.what());
        }
    }
    // The kind of reply a call takes.
    static message_kind reply_kind(call_kind kind) {
        switch (kind) {
            case call_kind::forward: return message_kind::forward_reply;
            case call_kind::backward: return message_kind::backward_reply;
            case call_kind::collect: return message_kind::collect_reply;
            case call_kind::apply:
            case call_kind::catch_up: return message_kind::apply_reply;
        }
        return message_kind::refused;
    }
    // A reply, read whole and checked (its sender, its kind, its sizes) before the policy
    // hears of it: a malformed one throws and is dropped, and its call stays awaited.
    void on_reply(message_reader& r, const routed_message& message) {
        const auto id = r.get<std::uint64_t>("call");
        const call* awaited = policy_.awaited(id);
        if (awaited == nullptr) {
            static_cast<void>(policy_.answered(id, 0));  // counted late
            return;
        }
        const call c = *awaited;
        link_of(c.worker, message.peer, "reply of worker").heard = clock::now();
        policy_.reachable(c.worker);
        if (r.kind() == message_kind::refused) {
            const auto worker_step = r.get<std::uint64_t>("worker step");
            const std::string why = r.get_string("reason");
            r.finish();
            policy_.refused(id, worker_step, why);
            return;
        }
        if (r.kind() != reply_kind(c.kind))
            throw invalid_argument("reply kind", std::string(to_string(r.kind())),
                                   std::string("call ") + std::to_string(id) + " was a " + swarm::to_string(c.kind));
        const auto seconds = r.get<double>("seconds");
        require(std::isfinite(seconds) && seconds >= 0, "reply seconds", seconds, "must be finite and >= 0");
        const auto expect_size = [&](const std::vector<float>& v, std::size_t size, const char* what) {
            require(v.size() == size, what, v.size(), "must hold " + std::to_string(size) + " values");
        };
        const auto k = std::size_t(c.stage);
        switch (c.kind) {
            case call_kind::forward: {
                auto output = r.get_floats("output");
                count_reply_bytes(r, message);
                expect_size(output, activation_size(), "forward output");
                tensors_.inputs[std::size_t(c.microbatch)][k + 1] = std::move(output);
                break;
            }
            case call_kind::backward: {
                const double loss = r.get<double>("loss");
                auto grad_input = r.get_floats("input gradient");
                count_reply_bytes(r, message);
                expect_size(grad_input, c.stage == 0 ? 0 : activation_size(), "input gradient");
                if (!c.redo) {  // a redone backward counts its contribution; its outputs were taken
                    if (is_last(c.stage)) tensors_.loss[std::size_t(c.microbatch)] = loss;
                    if (c.stage > 0) tensors_.grad_outputs[std::size_t(c.microbatch)][k - 1] = std::move(grad_input);
                }
                break;
            }
            case call_kind::collect: {
                auto sum = r.get_floats("gradient");
                r.finish();
                expect_size(sum, registries_[k].total_size(), "collected gradient");
                tensors_.partials[{c.stage, c.microbatches.front()}] = std::move(sum);
                break;
            }
            case call_kind::apply:
            case call_kind::catch_up:
                static_cast<void>(r.get<std::uint64_t>("worker step"));
                r.finish();
                break;
        }
        if (c.kind != call_kind::apply && c.kind != call_kind::catch_up) result_.served[k].insert(c.worker);
        policy_.answered(id, seconds);
    }
    // Counts an answer read to its end: its bytes, and what they would be plain.
    void count_reply_bytes(const message_reader& r, const routed_message& message) {
        r.finish();
        wire_bytes_ += message.bytes.size();
        plain_bytes_ += r.plain_size();
    }

    // ---- the step's gradient -----------------------------------------------------------
    // Each stage's sum of what was collected, added in micro-batch order of the collected
    // groups: the same bits on every worker it goes to.
    std::vector<std::vector<float>> summed_gradients() const {
        std::vector<std::vector<float>> gradients(std::size_t(options_.stages));
        for (int k = 0; k < options_.stages; ++k)
            gradients[std::size_t(k)].assign(registries_[std::size_t(k)].total_size(), 0.0f);
        for (const auto& [key, sum] : tensors_.partials) {
            auto& g = gradients[std::size_t(key.first)];
            for (std::size_t i = 0; i < g.size(); ++i) g[i] += sum[i];
        }
        return gradients;
    }

    // A tensor several stages hold (GPT-2's wte, first and last stage): every copy takes the
    // sum of their gradients, as train::tied_gradients does across pipeline ranks.
    void sum_tied_gradients(std::vector<std::vector<float>>& gradients) const {
        for (const auto& tie : tied_) {
            std::vector<std::span<float>> copies;
            for (std::size_t k = 0; k < registries_.size(); ++k)
                if (registries_[k].contains(tie.name)) {
                    const auto& info = registries_[k].find(tie.name);
                    copies.push_back(std::span<float>(gradients[k]).subspan(info.offset, info.size));
                }
            if (copies.size() < 2) continue;
            for (std::size_t i = 0; i < copies.front().size(); ++i) {
                float sum = 0;
                for (const auto& c : copies) sum += c[i];
                for (const auto& c : copies) c[i] = sum;
            }
        }
    }

    trainer_options options_;
    std::vector<nn::unit_range> units_;
    std::vector<models::tied_parameter> tied_ = models::gpt::tied_parameters(options_.model);
    std::vector<weft::parameter_registry> registries_;
    std::vector<std::vector<train::flat_run>> norm_runs_;  // what each stage counts in the norm
    coordinator policy_;
    zmq::context_t context_;
    zmq::socket_t router_socket_;
    std::map<worker_id, member_link> links_;
    std::map<std::uint64_t, clock::time_point> deadlines_;  // of the calls sent and awaited
    std::map<int, clock::time_point> starving_since_;       // stages with work and no live worker
    worker_id next_id_ = 0;
    step_tensors tensors_;
    applied_step applying_;                       // the step's gradient, on its way to the workers
    std::map<std::uint64_t, applied_step> history_;  // the steps a behind worker may replay
    step_result result_;
    peer_guard guard_{"swarm"};  // malformed messages dropped over the run, and the peers banned for them
    std::size_t dropped_before_step_ = 0;
    std::size_t wire_bytes_ = 0, plain_bytes_ = 0;
    std::optional<clock::time_point> last_rebalance_;
    // The checkpoint a resumed run started from, served to the workers fetching its stages.
    std::vector<std::unique_ptr<stage_service>> restored_;
    std::vector<state_image_server> restored_servers_;
};

}  // namespace weft::swarm::net
