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
#include <deque>
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
#include "weft/swarm/owed_calls.hpp"
#include "weft/swarm/protocol.hpp"
#include "weft/swarm/rebalancer.hpp"
#include "weft/swarm/router.hpp"
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

class trainer {
public:
    explicit trainer(trainer_options options)
        : options_(std::move(options)),
          units_(swarm_stage_units(options_.model, options_.stages, options_.partition)),
          router_socket_(make_socket(context_, zmq::socket_type::router)) {
        require(options_.microbatches >= 1, "--microbatches", options_.microbatches, "must be at least 1");
        require(options_.batch % options_.microbatches == 0, "--batch", options_.batch,
                "must be a multiple of --microbatches " + std::to_string(options_.microbatches));
        require(options_.max_attempts >= 1, "--max-attempts", options_.max_attempts, "must be at least 1");
        require(options_.max_in_flight >= 0, "--in-flight", options_.max_in_flight, "must be >= 0 (0: all of a step's)");
        require(options_.heartbeat_seconds > 0, "--heartbeat-s", options_.heartbeat_seconds, "must be > 0");
        router_socket_.set(zmq::sockopt::router_mandatory, 1);
        router_socket_.bind(tcp_endpoint(options_.listen, "--listen", true));
        for (int k = 0; k < options_.stages; ++k) {
            routers_.emplace_back(k, options_.routing, options_.seed + static_cast<std::uint64_t>(k));
            registries_.push_back(nn::gpt_stage<exec::cpu>::layout(options_.model, units_[std::size_t(k)]));
            norm_runs_.push_back(train::norm_counted_runs(registries_.back(), k, 0, tied_, units_));
        }
    }

    // HOST:PORT workers reach the rendezvous at.
    [[nodiscard]] std::string address() const { return bound_address(router_socket_); }
    [[nodiscard]] std::uint64_t step_index() const { return step_; }
    [[nodiscard]] const std::vector<nn::unit_range>& stage_units() const { return units_; }

    // Serves the rendezvous until worker `id` is ready (it joined, and fetched its state).
    void wait_for_worker(worker_id id, double seconds) {
        serve_until(seconds, [&]() -> std::string {
            const auto it = members_.find(id);
            if (it != members_.end() && it->second.live && it->second.ready) return {};
            return "worker " + std::to_string(id) + " did not become ready within " + std::to_string(seconds) +
                   " s (--wait-s)";
        });
    }

    // Serves the rendezvous until every stage has `per_stage` workers ready.
    void wait_for_workers(int per_stage, double seconds) {
        serve_until(seconds, [&]() -> std::string {
            std::string short_stages;
            for (int k = 0; k < options_.stages; ++k)
                if (ready_count(k) < per_stage)
                    short_stages += " stage " + std::to_string(k) + " has " + std::to_string(ready_count(k)) + ";";
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
        step_state st(options_.microbatches, options_.stages);
        st.batch = &batch;
        st.rows = batch.rows / options_.microbatches;
        result_ = step_result{};
        result_.step = static_cast<long long>(step_);
        dropped_before_step_ = dropped_.count;
        result_.served.resize(std::size_t(options_.stages));
        run_microbatches(st);
        std::vector<std::vector<float>> gradients = collect_gradients(st);
        sum_tied_gradients(gradients);
        double squares = 0;
        for (int k = 0; k < options_.stages; ++k)
            squares += train::counted_sum_of_squares<float>(gradients[std::size_t(k)], 0, norm_runs_[std::size_t(k)]);
        double loss = 0;
        for (const double l : st.loss) loss += l;
        loss /= options_.microbatches;
        result_.grad_norm = std::sqrt(squares);
        if (!std::isfinite(loss) || !std::isfinite(result_.grad_norm))
            throw error("step " + std::to_string(step_) + " is not finite (loss " + std::to_string(loss) +
                        ", gradient norm " + std::to_string(result_.grad_norm) +
                        "); it was not applied: lower --lr or check the data");
        const double clip = train::clip_coefficient(options_.grad_clip, result_.grad_norm);
        const auto [lost, behind] = apply(gradients, lr, clip);
        result_.loss = loss;
        result_.samples = st.counted_rows;
        result_.seconds = std::chrono::duration<double>(clock::now() - started).count();
        result_.wire_bytes_per_microbatch = static_cast<double>(wire_bytes_) / options_.microbatches;
        result_.plain_bytes_per_microbatch = static_cast<double>(plain_bytes_) / options_.microbatches;
        wire_bytes_ = plain_bytes_ = 0;
        if (options_.catch_up_steps > 0) {
            history_.push_back({step_, lr, clip, std::move(gradients)});
            while (history_.size() > static_cast<std::size_t>(options_.catch_up_steps)) history_.pop_front();
        }
        ++step_;
        for (const worker_id id : lost) send_rejoin(id, members_.at(id));
        for (const worker_id id : behind) bring_up_to_date(id, members_.at(id));
        result_.moved = rebalance();
        return result_;
    }

    // Tells every member the run is over.
    void stop_workers() {
        for (auto& [id, m] : members_) {
            message_writer w(message_kind::stop);
            static_cast<void>(send_to(router_socket_, m.peer, w.take()));
        }
        // Let the messages leave before the socket closes (linger is 0).
        pump(std::chrono::milliseconds(100));
    }

    [[nodiscard]] std::vector<member_summary> members() const {
        std::vector<member_summary> out;
        for (const auto& [id, m] : members_)
            out.push_back({id, m.stage, m.live && m.ready, m.calls, m.timeouts, m.deaths, m.state_address});
        return out;
    }

private:
    using clock = std::chrono::steady_clock;

    struct member {
        std::string peer;           // routing id of its call socket
        std::string state_address;  // HOST:PORT of its state server
        int stage = 0;
        bool live = true;   // heard from within the expiry
        bool ready = false;  // holds the current step's state and is in its router
        std::uint64_t step = 0;
        clock::time_point heard;
        long long calls = 0, timeouts = 0, deaths = 0;
        owed_calls owed{};  // the calls it has not answered: a new call waits behind them
        int catching_up = 0;        // replayed steps on their way
        bool catch_up_failed = false;
    };

    // A call on its way: what it was for, so its answer (or its loss) can be handled.
    enum class call_kind { forward, backward, collect, apply, catch_up };
    // The class the router times a call in; only forwards and backwards are routed by it.
    static bool routed(call_kind kind) { return kind == call_kind::forward || kind == call_kind::backward; }
    static call_class routed_as(call_kind kind) {
        return kind == call_kind::forward ? call_class::forward : call_class::backward;
    }
    struct pending_call {
        call_kind kind;
        worker_id worker;
        int stage;
        int microbatch;
        std::vector<std::int32_t> microbatches;  // collect
        clock::time_point sent, deadline;
        double timeout_seconds = 0;  // its own share of the deadline (the rest: the calls ahead of it)
    };
    struct completion {
        pending_call call;
        bool ok = false;
        std::string why;  // when not ok
        std::vector<std::byte> bytes;
    };

    struct microbatch_task {
        int stage = 0;
        bool backward = false;  // on the way back
        bool started = false;
        bool done = false;
        bool in_flight = false;
        int attempts = 0;
        std::optional<clock::time_point> waiting_since;  // no live worker to send to
    };
    static microbatch_task redo_task(int stage) {
        microbatch_task t;
        t.stage = stage;
        t.backward = true;
        return t;
    }
    struct step_state {
        step_state(int microbatches, int stages)
            : tasks(std::size_t(microbatches)),
              inputs(std::size_t(microbatches), std::vector<std::vector<float>>(std::size_t(stages))),
              grad_outputs(std::size_t(microbatches), std::vector<std::vector<float>>(std::size_t(stages))),
              loss(std::size_t(microbatches), 0.0) {}
        const data::token_batch* batch = nullptr;
        int rows = 0;
        std::vector<microbatch_task> tasks;
        std::vector<std::vector<std::vector<float>>> inputs;        // [mb][stage], stage >= 1
        std::vector<std::vector<std::vector<float>>> grad_outputs;  // [mb][stage], stage < last
        std::vector<double> loss;
        std::map<std::pair<int, int>, worker_id> accepted;  // (stage, mb) -> whose backward counts
        long long counted_rows = 0;
    };

    // Pumps messages until `unmet()` gives an empty string; past `seconds`, throws what it gives.
    template <class Unmet>
    void serve_until(double seconds, Unmet unmet) {
        const auto deadline = clock::now() + std::chrono::duration<double>(seconds);
        while (true) {
            pump(std::chrono::milliseconds(5));
            std::string why = unmet();
            if (why.empty()) return;
            if (clock::now() > deadline) throw error(why);
        }
    }

    [[nodiscard]] int ready_count(int stage) const {
        int n = 0;
        for (const auto& [id, m] : members_) n += (m.live && m.ready && m.stage == stage) ? 1 : 0;
        return n;
    }
    [[nodiscard]] double expiry_seconds() const { return options_.heartbeat_seconds * options_.missed_heartbeats; }
    [[nodiscard]] bool is_last(int stage) const { return stage == options_.stages - 1; }

    // ---- membership --------------------------------------------------------------------
    void on_hello(const std::string& peer, message_reader& r) {
        const hello_message hello = read_hello(r);
        worker_id id = next_id_;
        if (hello.requested_id >= 0) {
            id = static_cast<worker_id>(hello.requested_id);
            if (auto it = members_.find(id); it != members_.end() && it->second.live && it->second.peer != peer) {
                std::fprintf(stderr, "swarm: a second worker asked for id %llu, which is live; it gets %llu\n",
                             static_cast<unsigned long long>(id), static_cast<unsigned long long>(next_id_));
                id = next_id_;
            }
        }
        next_id_ = std::max(next_id_, id + 1);
        int stage = hello.requested_stage;
        if (stage < 0 || stage >= options_.stages || (step_ > 0 && ready_count(stage) == 0)) stage = stage_to_join();
        member& m = members_[id];
        if (m.live && m.ready) routers_[std::size_t(m.stage)].leave(id);
        m = member{.peer = peer, .state_address = hello.state_address, .stage = stage, .live = true, .ready = false,
                   .step = 0, .heard = clock::now()};
        welcome_message w{.id = id, .stage = stage, .stages = options_.stages, .step = step_, .model = options_.model,
                          .units = units_[std::size_t(stage)], .optimizer = options_.optimizer,
                          .init_from = options_.init_from, .heartbeat_seconds = options_.heartbeat_seconds,
                          .expiry_seconds = expiry_seconds(), .compress_block = options_.compress_block,
                          .chunk_elements = options_.chunk_elements, .faults = {}, .peers = peers_of(stage, id)};
        if (auto f = options_.faults.find(static_cast<std::int64_t>(id)); f != options_.faults.end()) w.faults = f->second;
        message_writer out(message_kind::welcome);
        write(out, w);
        if (!send_to(router_socket_, peer, out.take())) m.live = false;
    }
    // The stage a worker without a wish joins: the most loaded among those that still hold
    // state (all of them at step 0; past it, a stage whose workers all died has no state to
    // fetch, and the run has failed).
    [[nodiscard]] int stage_to_join() const {
        std::vector<stage_load> loads;
        std::vector<int> stage_of;
        for (int k = 0; k < options_.stages; ++k) {
            if (step_ > 0 && ready_count(k) == 0) continue;
            loads.push_back(load_of(k));
            stage_of.push_back(k);
        }
        return loads.empty() ? 0 : stage_of[std::size_t(most_loaded_stage(loads))];
    }
    // Stage k's pool as the rebalancer sees it: its ready workers at their measured rates.
    [[nodiscard]] stage_load load_of(int k) const {
        std::vector<worker_id> ready;
        for (const auto& [id, m] : members_)
            if (m.live && m.ready && m.stage == k) ready.push_back(id);
        return load_from_router(routers_[std::size_t(k)], ready, microbatch_calls(is_last(k)),
                                options_.routing.initial_seconds);
    }
    // Every --rebalance-s, between steps: at most one worker moves to the most loaded stage.
    std::optional<worker_move> rebalance() {
        if (options_.rebalance_seconds <= 0) return std::nullopt;
        const auto now = clock::now();
        if (!last_rebalance_) last_rebalance_ = now;
        if (now - *last_rebalance_ < std::chrono::duration<double>(options_.rebalance_seconds)) return std::nullopt;
        // A worker on its way in (joining, or moving) is in no pool yet; judging the loads
        // without it would send a second worker after the first.
        for (const auto& [id, m] : members_)
            if (m.live && !m.ready) return std::nullopt;
        last_rebalance_ = now;
        std::vector<stage_load> loads;
        for (int k = 0; k < options_.stages; ++k) loads.push_back(load_of(k));
        const auto move = plan_move(loads, options_.rebalancing);
        if (!move) return std::nullopt;
        member& m = members_.at(move->worker);
        routers_[std::size_t(m.stage)].leave(move->worker);
        m.ready = false;
        m.stage = move->to;
        send_rejoin(move->worker, m);  // it fetches stage `to`'s state from that stage's peers
        return move;
    }
    [[nodiscard]] std::vector<peer_address> peers_of(int stage, worker_id except) const {
        std::vector<peer_address> peers;
        for (const auto& [id, m] : members_)
            // m.step is step_ + 1 for a peer whose apply of this step already answered: it
            // holds a newer state, which serves as well (the joiner catches up to either).
            if (id != except && m.live && m.ready && m.stage == stage && m.step >= step_)
                peers.push_back({id, m.state_address});
        return peers;
    }
    // A stale member fetches its stage's state again (or a new stage's, on a move).
    void send_rejoin(worker_id id, member& m) {
        if (m.ready) routers_[std::size_t(m.stage)].leave(id);
        m.ready = false;
        message_writer w(message_kind::rejoin);
        w.put(static_cast<std::int32_t>(m.stage)).put(units_[std::size_t(m.stage)].first);
        w.put(units_[std::size_t(m.stage)].last).put(step_);
        write_peers(w, peers_of(m.stage, id));
        if (!send_to(router_socket_, m.peer, w.take())) mark_dead(id, m, "its connection is gone");
    }
    void on_ready(message_reader& r) {
        const auto id = r.get<worker_id>("id");
        const auto step = r.get<std::uint64_t>("step");
        r.finish();
        auto it = members_.find(id);
        if (it == members_.end()) return;
        member& m = it->second;
        m.heard = clock::now();
        m.live = true;
        m.step = step;
        bring_up_to_date(id, m);
    }
    // Catch-up: a worker holding an older step's state (its fetch took a while, or it became
    // ready after this step's applies went out) is sent the kept steps' averaged gradients as
    // applies, in order, and joins its stage's router once it holds the current step. One
    // too far behind, or whose replay fails, fetches the state again.
    void bring_up_to_date(worker_id id, member& m) {
        if (m.catching_up > 0) return;  // the replies bring it on
        if (m.step == step_) {
            m.ready = true;
            routers_[std::size_t(m.stage)].join(id);
            return;
        }
        if (m.ready) routers_[std::size_t(m.stage)].leave(id);
        m.ready = false;
        if (m.step > step_ || history_.empty() || m.step < history_.front().step) {
            send_rejoin(id, m);
            return;
        }
        m.catch_up_failed = false;
        for (const auto& h : history_) {
            if (h.step < m.step) continue;
            const std::uint64_t call = next_call_++;
            message_writer w(message_kind::apply);
            w.put(call).put(h.step).put(h.lr).put(h.clip).put_floats(h.gradients[std::size_t(m.stage)]);
            if (!send_call(id, {call_kind::catch_up, id, m.stage, -1, {}, {}, {}}, w, call)) return;
            ++m.catching_up;
        }
    }
    void caught_up(worker_id id, bool ok) {
        member& m = members_.at(id);
        --m.catching_up;
        if (ok) ++m.step;
        else m.catch_up_failed = true;
        if (m.catching_up > 0 || !m.live) return;
        if (m.catch_up_failed) send_rejoin(id, m);
        else bring_up_to_date(id, m);
    }
    void on_heartbeat(const std::string& peer, message_reader& r) {
        const auto id = r.get<worker_id>("id");
        static_cast<void>(r.get<std::uint64_t>("step"));
        r.finish();
        static_cast<void>(send_to(router_socket_, peer, message_writer(message_kind::heartbeat_ack).take()));
        auto it = members_.find(id);
        if (it == members_.end()) return;
        member& m = it->second;
        m.heard = clock::now();
        if (!m.live) {  // it was given up on but is back: it must fetch its state again
            m.live = true;
            send_rejoin(id, m);
        }
    }
    void mark_dead(worker_id id, member& m, const std::string& why) {
        if (!m.live) return;
        m.live = false;
        m.ready = false;
        ++m.deaths;
        routers_[std::size_t(m.stage)].failed(id);
        std::fprintf(stderr, "swarm: worker %llu of stage %d banned: %s\n", static_cast<unsigned long long>(id),
                     m.stage, why.c_str());
        // Its calls on the way are lost, its replayed steps with them.
        m.catching_up = 0;
        m.owed.clear();
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second.worker == id) {
                if (it->second.kind != call_kind::catch_up)
                    completions_.push_back({it->second, false, "worker " + std::to_string(id) + " died", {}});
                it = pending_.erase(it);
            } else {
                ++it;
            }
        }
    }

    // ---- the event loop ----------------------------------------------------------------
    // Waits up to `wait` for messages, handles them, then expires silent members and
    // overdue calls.
    void pump(std::chrono::milliseconds wait) {
        zmq::socket_t* sockets[] = {&router_socket_};
        if (wait_readable(sockets, wait)[0]) {
            while (auto m = receive_from(router_socket_, &dropped_)) {
                if (banned_peers_.contains(m->peer)) {
                    dropped_.add(m->peer);
                    continue;
                }
                dispatch(*m);
                ban_repeat_offenders();
            }
            ban_repeat_offenders();  // a peer whose messages were all of the wrong shape
        }
        result_.dropped_messages = static_cast<long long>(dropped_.count - dropped_before_step_);
        const auto now = clock::now();
        for (auto& [id, m] : members_)
            if (m.live && now - m.heard > std::chrono::duration<double>(expiry_seconds()))
                mark_dead(id, m, "no heartbeat for " + std::to_string(expiry_seconds()) + " s");
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (now > it->second.deadline) {
                auto& m = members_.at(it->second.worker);
                ++m.timeouts;
                m.owed.settle(it->second.timeout_seconds);
                const pending_call call = it->second;
                it = pending_.erase(it);
                if (call.kind == call_kind::catch_up) {
                    caught_up(call.worker, false);
                    continue;
                }
                routers_[std::size_t(call.stage)].timed_out(call.worker);
                completions_.push_back({call, false, "timed out", {}});
            } else {
                ++it;
            }
        }
    }
    void dispatch(const routed_message& message) {
        try {
            message_reader r(message.bytes, "peer '" + printable_peer(message.peer) + "'");
            switch (r.kind()) {
                case message_kind::hello: on_hello(message.peer, r); return;
                case message_kind::ready: on_ready(r); return;
                case message_kind::heartbeat: on_heartbeat(message.peer, r); return;
                case message_kind::forward_reply:
                case message_kind::backward_reply:
                case message_kind::collect_reply:
                case message_kind::apply_reply:
                case message_kind::refused: on_reply(r, message); return;
                default:
                    throw invalid_argument("message kind", std::string(to_string(r.kind())),
                                           "the trainer takes hello, ready, heartbeat and call replies");
            }
        } catch (const std::exception& e) {
            // A malformed message costs that message, not the run (std::exception: contents
            // that name no known member or call are refused as well as bytes that do not parse).
            std::fprintf(stderr, "swarm: dropped a message from peer '%s': %s\n", printable_peer(message.peer).c_str(),
                         e.what());
            dropped_.add(message.peer);
        }
    }
    // A peer that keeps sending malformed messages is banned: what it sends is dropped unread.
    // Workers send none, so a worker is never banned this way (a stall or a crash bans it).
    void ban_repeat_offenders() {
        for (const auto& [peer, count] : dropped_.by_peer)
            if (count >= malformed_before_ban && banned_peers_.insert(peer).second)
                std::fprintf(stderr, "swarm: peer '%s' banned after %zu malformed messages\n", printable_peer(peer).c_str(),
                             count);
    }
    void on_reply(message_reader& r, const routed_message& message) {
        const auto call = r.get<std::uint64_t>("call");
        const auto it = pending_.find(call);
        if (it == pending_.end()) {
            ++result_.late_replies;
            return;
        }
        pending_call p = it->second;
        pending_.erase(it);
        member& m = members_.at(p.worker);
        m.owed.settle(p.timeout_seconds);
        m.heard = clock::now();
        if (p.kind == call_kind::catch_up) {
            caught_up(p.worker, r.kind() == message_kind::apply_reply);
            return;
        }
        if (r.kind() == message_kind::refused) {
            const auto worker_step = r.get<std::uint64_t>("worker step");
            const std::string why = r.get_string("reason");
            completions_.push_back({p, false, "refused: " + why, {}});
            // A worker holding another step's state fetches the current one.
            if (worker_step != step_) send_rejoin(p.worker, m);
            return;
        }
        const auto seconds = r.get<double>("seconds");
        // The router and the rebalancer weigh workers by the calls they route; a collect or
        // an apply costs every worker of a stage the same once a step.
        if (routed(p.kind)) routers_[std::size_t(p.stage)].finished(p.worker, seconds, routed_as(p.kind));
        ++m.calls;
        completions_.push_back({p, true, {}, message.bytes});
    }

    // Sends a call to a worker; false when it is gone (then it is banned).
    bool send_call(worker_id id, pending_call call, message_writer& w, std::uint64_t call_id) {
        member& m = members_.at(id);
        call.worker = id;
        call.sent = clock::now();
        // A routed call gets its worker's timeout for its class, a collect or an apply that for
        // any call. A catching-up worker is in no router yet: its replayed steps get the expiry
        // time. A worker serves its calls in turn, so one sent behind others waits for theirs too.
        call.timeout_seconds = expiry_seconds();
        if (call.kind != call_kind::catch_up) {
            const router& route = routers_[std::size_t(call.stage)];
            call.timeout_seconds =
                routed(call.kind) ? route.timeout_seconds(id, routed_as(call.kind)) : route.timeout_seconds(id);
        }
        call.deadline = call.sent + std::chrono::duration_cast<clock::duration>(
                                        std::chrono::duration<double>(m.owed.due_after(call.timeout_seconds)));
        if (routed(call.kind)) {
            wire_bytes_ += w.size();
            plain_bytes_ += w.plain_size();
        }
        if (!send_to(router_socket_, m.peer, w.take())) {
            mark_dead(id, m, "its connection is gone");
            return false;
        }
        m.owed.add(call.timeout_seconds);
        pending_.emplace(call_id, std::move(call));
        return true;
    }
    std::optional<worker_id> pick(int stage, call_class kind) {
        auto& route = routers_[std::size_t(stage)];
        while (auto id = route.pick(kind)) {
            const member& m = members_.at(*id);
            if (m.live && m.ready && m.step == step_) return id;
            route.leave(*id);
        }
        return std::nullopt;
    }
    void no_worker(int stage, std::optional<clock::time_point>& since) {
        if (!since) since = clock::now();
        if (clock::now() - *since > std::chrono::duration<double>(options_.wait_for_worker_seconds))
            throw error("stage " + std::to_string(stage) + " has no live worker: none answered within --wait-s " +
                        std::to_string(options_.wait_for_worker_seconds) + " s (" +
                        std::to_string(members_.size()) + " workers ever joined); start workers with --role worker "
                        "--rendezvous " + address());
    }

    // ---- step 1: every micro-batch there and back --------------------------------------
    // F or B of `mb` at `stage`: the kept input, and the output gradient or the targets.
    message_writer call_message(const step_state& st, int mb, int stage, bool backward, std::uint64_t call) {
        message_writer w(backward ? message_kind::backward : message_kind::forward);
        w.put(call).put(step_);
        if (backward) w.put(static_cast<std::int32_t>(mb));
        const auto block = options_.compress_block;
        w.put(static_cast<std::int32_t>(st.rows));
        const auto& activations = st.inputs[std::size_t(mb)][std::size_t(stage)];
        const data::token_batch_view rows = data::micro_batch(*st.batch, mb, options_.microbatches);
        w.put_ints(stage == 0 ? rows.inputs : std::span<const std::int32_t>());
        w.put_floats(activations, block);
        if (backward) {
            const auto& grad = st.grad_outputs[std::size_t(mb)][std::size_t(stage)];
            w.put_floats(grad, block);
            w.put_ints(is_last(stage) ? rows.targets : std::span<const std::int32_t>());
            w.put(static_cast<double>(st.rows) / options_.batch);  // the micro-batch's share of the samples
        }
        return w;
    }
    void retry(microbatch_task& t, const std::string& what, const std::string& why) {
        ++result_.retried_calls;
        if (++t.attempts >= options_.max_attempts)
            throw error(what + " failed " + std::to_string(t.attempts) + " times (the last: " + why +
                        "); the retry cap is --max-attempts " + std::to_string(options_.max_attempts));
    }
    void run_microbatches(step_state& st) {
        const int count = options_.microbatches;
        const int cap = options_.max_in_flight > 0 ? options_.max_in_flight : count;
        int done = 0, started = 0;
        while (done < count) {
            for (int mb = 0; mb < count; ++mb) {
                auto& t = st.tasks[std::size_t(mb)];
                if (t.done || t.in_flight) continue;
                if (!t.started && started - done >= cap) continue;  // --in-flight: it waits its turn
                // The last stage does forward, loss and backward in one call.
                const bool backward = t.backward || is_last(t.stage);
                const auto id = pick(t.stage, backward ? call_class::backward : call_class::forward);
                if (!id) {
                    no_worker(t.stage, t.waiting_since);
                    continue;
                }
                t.waiting_since.reset();
                if (!t.started) {
                    t.started = true;
                    ++started;
                }
                const std::uint64_t call = next_call_++;
                auto w = call_message(st, mb, t.stage, backward, call);
                t.in_flight = send_call(*id, {backward ? call_kind::backward : call_kind::forward, *id, t.stage, mb,
                                              {}, {}, {}},
                                        w, call);
            }
            pump(std::chrono::milliseconds(5));
            while (!completions_.empty()) {
                completion c = std::move(completions_.front());
                completions_.pop_front();
                if (c.call.kind != call_kind::forward && c.call.kind != call_kind::backward) continue;
                auto& t = st.tasks[std::size_t(c.call.microbatch)];
                t.in_flight = false;
                const std::string what = std::string(c.call.kind == call_kind::forward ? "forward" : "backward") +
                                         " of micro-batch " + std::to_string(c.call.microbatch) + " at stage " +
                                         std::to_string(c.call.stage);
                if (!c.ok) {
                    retry(t, what, c.why);
                    continue;
                }
                if (advance(st, c)) ++done;
            }
        }
    }
    // An answer's results: past the call id and seconds on_reply read.
    static message_reader results_of(const completion& c) {
        message_reader r(c.bytes, "worker " + std::to_string(c.call.worker));
        static_cast<void>(r.get<std::uint64_t>("call"));
        static_cast<void>(r.get<double>("seconds"));
        return r;
    }
    // Counts an answer read to its end: its bytes, and what they would be plain.
    void count_reply_bytes(const message_reader& r, const completion& c) {
        r.finish();
        wire_bytes_ += c.bytes.size();
        plain_bytes_ += r.plain_size();
    }

    // Takes a call's answer; true when its micro-batch has come all the way back.
    bool advance(step_state& st, const completion& c) {
        message_reader r = results_of(c);
        const int mb = c.call.microbatch, k = c.call.stage;
        auto& t = st.tasks[std::size_t(mb)];
        result_.served[std::size_t(k)].insert(c.call.worker);
        if (c.call.kind == call_kind::forward) {
            st.inputs[std::size_t(mb)][std::size_t(k + 1)] = r.get_floats("output");
            count_reply_bytes(r, c);
            t.stage = k + 1;
            t.attempts = 0;
            return false;
        }
        const double loss = r.get<double>("loss");
        std::vector<float> grad_input = r.get_floats("input gradient");
        count_reply_bytes(r, c);
        if (is_last(k)) st.loss[std::size_t(mb)] = loss;
        st.accepted[{k, mb}] = c.call.worker;
        t.attempts = 0;
        if (k == 0) {
            t.done = true;
            return true;
        }
        st.grad_outputs[std::size_t(mb)][std::size_t(k - 1)] = std::move(grad_input);
        t.stage = k - 1;
        t.backward = true;
        return false;
    }

    // ---- step 2: collect each accepted contribution once ------------------------------
    std::vector<std::vector<float>> collect_gradients(step_state& st) {
        std::set<std::pair<int, int>> need;  // (stage, mb) not collected yet
        for (const auto& [key, id] : st.accepted) need.insert(key);
        std::set<std::pair<int, int>> in_flight;
        std::map<std::pair<int, int>, std::vector<float>> partials;  // (stage, first mb) -> sum
        std::map<std::pair<int, int>, microbatch_task> redo;         // backwards to run again
        std::vector<long long> rows(std::size_t(options_.stages), 0);
        while (!need.empty()) {
            // Group what is needed by the worker whose contribution counts.
            std::map<std::pair<int, worker_id>, std::vector<std::int32_t>> groups;
            for (const auto& key : need)
                if (!in_flight.contains(key) && !redo.contains(key))
                    groups[{key.first, st.accepted.at(key)}].push_back(key.second);
            for (auto& [group, mbs] : groups) {
                const auto [k, id] = group;
                const member& m = members_.at(id);
                if (!(m.live && m.ready && m.step == step_)) {  // gone: its backwards are redone
                    for (const int mb : mbs) redo[{k, mb}] = redo_task(k);
                    continue;
                }
                const std::uint64_t call = next_call_++;
                message_writer w(message_kind::collect);
                w.put(call).put(step_).put_ints(mbs);
                for (const int mb : mbs) in_flight.insert({k, mb});
                if (!send_call(id, {call_kind::collect, id, k, -1, mbs, {}, {}}, w, call))
                    for (const int mb : mbs) in_flight.erase({k, mb}), redo[{k, mb}] = redo_task(k);
            }
            // Backwards to redo: any live worker of the stage, from the kept inputs.
            for (auto& [key, t] : redo) {
                if (t.in_flight) continue;
                const auto id = pick(key.first, call_class::backward);
                if (!id) {
                    no_worker(key.first, t.waiting_since);
                    continue;
                }
                const std::uint64_t call = next_call_++;
                auto w = call_message(st, key.second, key.first, true, call);
                t.in_flight = send_call(*id, {call_kind::backward, *id, key.first, key.second, {}, {}, {}}, w, call);
            }
            pump(std::chrono::milliseconds(5));
            while (!completions_.empty()) {
                completion c = std::move(completions_.front());
                completions_.pop_front();
                const int k = c.call.stage;
                if (c.call.kind == call_kind::collect) {
                    for (const int mb : c.call.microbatches) in_flight.erase({k, mb});
                    if (!c.ok) {
                        ++result_.retried_calls;
                        for (const int mb : c.call.microbatches) redo[{k, mb}] = redo_task(k);
                        continue;
                    }
                    message_reader r = results_of(c);
                    auto sum = r.get_floats("gradient");
                    r.finish();
                    require(sum.size() == registries_[std::size_t(k)].total_size(), "collected gradient", sum.size(),
                            "must hold stage " + std::to_string(k) + "'s parameters");
                    partials[{k, *std::min_element(c.call.microbatches.begin(), c.call.microbatches.end())}] =
                        std::move(sum);
                    for (const int mb : c.call.microbatches) {
                        need.erase({k, mb});
                        rows[std::size_t(k)] += st.rows;
                    }
                    result_.served[std::size_t(k)].insert(c.call.worker);
                } else if (c.call.kind == call_kind::backward) {
                    const auto it = redo.find({k, c.call.microbatch});
                    if (it == redo.end()) continue;
                    auto& t = it->second;
                    t.in_flight = false;
                    if (!c.ok) {
                        retry(t, "the redone backward of micro-batch " + std::to_string(c.call.microbatch) +
                                     " at stage " + std::to_string(k), c.why);
                        continue;
                    }
                    st.accepted[{k, c.call.microbatch}] = c.call.worker;
                    redo.erase({k, c.call.microbatch});
                }
            }
        }
        // The samples counted: the same at every stage, each once.
        for (int k = 0; k < options_.stages; ++k)
            require(rows[std::size_t(k)] == options_.batch, "samples counted at stage " + std::to_string(k),
                    rows[std::size_t(k)], "must be the batch's " + std::to_string(options_.batch));
        st.counted_rows = rows[0];
        // Summed in micro-batch order of the groups: the same bits on every worker it goes to.
        std::vector<std::vector<float>> gradients(std::size_t(options_.stages));
        for (int k = 0; k < options_.stages; ++k) gradients[std::size_t(k)].assign(registries_[std::size_t(k)].total_size(), 0.0f);
        for (const auto& [key, sum] : partials) {
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

    // ---- step 3: every live worker of each stage steps with its stage's gradient ------
    // Returns the members whose state is unknown (the apply was lost: they fetch it again),
    // and those that became ready while the applies went out (they catch up).
    struct apply_outcome {
        std::vector<worker_id> lost, behind;
    };
    apply_outcome apply(const std::vector<std::vector<float>>& gradients, double lr, double clip) {
        std::vector<int> applied(std::size_t(options_.stages), 0);
        std::set<worker_id> waiting;
        apply_outcome out;
        for (auto& [id, m] : members_) {
            if (!(m.live && m.ready && m.step == step_)) continue;
            const std::uint64_t call = next_call_++;
            message_writer w(message_kind::apply);
            w.put(call).put(step_).put(lr).put(clip).put_floats(gradients[std::size_t(m.stage)]);
            if (send_call(id, {call_kind::apply, id, m.stage, -1, {}, {}, {}}, w, call)) waiting.insert(id);
        }
        while (!waiting.empty()) {
            pump(std::chrono::milliseconds(5));
            while (!completions_.empty()) {
                completion c = std::move(completions_.front());
                completions_.pop_front();
                if (c.call.kind != call_kind::apply) continue;
                waiting.erase(c.call.worker);
                member& m = members_.at(c.call.worker);
                if (c.ok) {
                    m.step = step_ + 1;
                    ++applied[std::size_t(c.call.stage)];
                } else if (m.live) {
                    if (m.ready) routers_[std::size_t(m.stage)].leave(c.call.worker);
                    m.ready = false;
                    out.lost.push_back(c.call.worker);
                }
            }
        }
        for (int k = 0; k < options_.stages; ++k)
            if (applied[std::size_t(k)] == 0)
                throw error("stage " + std::to_string(k) + " lost every worker while stepping at step " +
                            std::to_string(step_) + ": no one holds its state any more, the run cannot go on");
        // Ready members not stepped: they became ready after the applies went out.
        for (auto& [id, m] : members_)
            if (m.live && m.ready && m.step != step_ + 1) {
                routers_[std::size_t(m.stage)].leave(id);
                m.ready = false;
                out.behind.push_back(id);
            }
        return out;
    }

    trainer_options options_;
    std::vector<nn::unit_range> units_;
    std::vector<models::tied_parameter> tied_ = models::gpt::tied_parameters(options_.model);
    std::vector<weft::parameter_registry> registries_;
    std::vector<std::vector<train::flat_run>> norm_runs_;  // what each stage counts in the norm
    zmq::context_t context_;
    zmq::socket_t router_socket_;
    std::vector<router> routers_;
    std::map<worker_id, member> members_;
    std::map<std::uint64_t, pending_call> pending_;
    std::deque<completion> completions_;
    worker_id next_id_ = 0;
    std::uint64_t next_call_ = 1;
    std::uint64_t step_ = 0;
    step_result result_;
    // Malformed messages dropped over the run, and the peers banned for them (see dispatch).
    static constexpr std::size_t malformed_before_ban = 8;
    dropped_messages dropped_;
    std::size_t dropped_before_step_ = 0;
    std::set<std::string> banned_peers_;
    std::size_t wire_bytes_ = 0, plain_bytes_ = 0;
    std::optional<clock::time_point> last_rebalance_;
    struct applied_step {
        std::uint64_t step = 0;
        double lr = 0, clip = 1;
        std::vector<std::vector<float>> gradients;  // per stage
    };
    std::deque<applied_step> history_;  // the last catch_up_steps steps, for catch-up
};

}  // namespace weft::swarm::net
