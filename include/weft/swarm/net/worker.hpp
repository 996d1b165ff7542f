// A SWARM worker process: it announces itself to the rendezvous, fetches its stage's state
// from several peers in chunks (or starts from the initial weights), then serves stateless
// calls (swarm/stage_service.hpp) until told to stop. A second thread beats the heartbeat
// that keeps it a member; when the trainer stops answering those, the worker ends, so no
// worker outlives its run.
//
// Sockets: a DEALER to the rendezvous for calls, a second DEALER (the heartbeat thread's),
// and a ROUTER where peers fetch this worker's state.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/safetensors.hpp"
#include "weft/swarm/net/link.hpp"
#include "weft/swarm/net/peer_guard.hpp"
#include "weft/swarm/net/state_server.hpp"
#include "weft/swarm/protocol.hpp"
#include "weft/swarm/stage_service.hpp"
#include "weft/swarm/wire.hpp"

namespace weft::swarm::net {

struct worker_options {
    std::string rendezvous;          // HOST:PORT of the rendezvous (the trainer)
    std::int64_t requested_id = -1;  // -1: the rendezvous numbers it
    int requested_stage = -1;        // -1: the rendezvous chooses
    std::string host = "127.0.0.1";  // the address peers reach this worker's state server at
    double connect_timeout_seconds = 10;
    double fetch_timeout_seconds = 5;  // a peer that does not answer a chunk within this is passed over (--fetch-timeout-s)
};

// What a worker did, printed when it ends.
struct worker_report {
    worker_id id = 0;
    int stage = -1;
    std::string joined_through;  // the peer that sent it on to the trainer, if it was not the trainer
    std::vector<int> earlier_stages;  // stages it served before a move, in order
    std::map<std::string, long long> served;  // calls served, by kind
    long long refused = 0;
    std::map<worker_id, long long> chunks_from;  // state chunks fetched, by donor
    std::set<worker_id> banned_peers;  // peers that failed to hand out state
    std::size_t dropped_messages = 0;  // malformed messages to its state server, dropped
    std::size_t banned_strangers = 0;  // peers banned for sending them
    int reconnects = 0;                // times the trainer stopped answering and one welcomed it back
    std::string summary() const {
        std::string text = "worker " + std::to_string(id) + " | stage " + std::to_string(stage);
        if (!earlier_stages.empty()) {
            text += " (moved from";
            for (const int k : earlier_stages) text += " " + std::to_string(k);
            text += ")";
        }
        if (!joined_through.empty()) text += " | joined through " + joined_through;
        text += " | served";
        for (const auto& [kind, n] : served) text += " " + kind + " " + std::to_string(n);
        text += " | state chunks from";
        if (chunks_from.empty()) text += " none";
        for (const auto& [donor, n] : chunks_from)
            text += " " + (donor == checkpoint_peer_id ? std::string("checkpoint") : std::to_string(donor)) + ":" +
                    std::to_string(n);
        text += " | refused " + std::to_string(refused) + " | banned peers";
        if (banned_peers.empty()) text += " none";
        for (const worker_id p : banned_peers) text += " " + std::to_string(p);
        if (reconnects > 0) text += " | welcomed back " + std::to_string(reconnects) + " time(s) after losing the trainer";
        if (dropped_messages > 0)
            text += " | dropped " + std::to_string(dropped_messages) + " malformed messages, banned " +
                    std::to_string(banned_strangers) + " peers for them";
        return text;
    }
};

class worker {
public:
    explicit worker(worker_options options)
        : options_(std::move(options)),
          endpoint_(tcp_endpoint(options_.rendezvous, "--rendezvous", false)),
          calls_(make_dealer_with_identity(context_, "worker-calls")),
          state_server_(make_socket(context_, zmq::socket_type::router)) {
        require(options_.connect_timeout_seconds > 0, "--connect-timeout-s", options_.connect_timeout_seconds,
                "must be > 0 seconds");
        require(options_.fetch_timeout_seconds > 0, "--fetch-timeout-s", options_.fetch_timeout_seconds,
                "must be > 0 seconds");
        state_server_.bind("tcp://" + options_.host + ":*");
        calls_.connect(endpoint_);
    }

    // Joins and serves until the trainer says stop. The report is the worker's to print. When
    // the trainer stops answering heartbeats (it died, or its host did), the worker says hello
    // again at --rendezvous for up to --connect-timeout-s: a trainer restarted there (--resume)
    // welcomes it back, under its id and for its stage, and it fetches its state anew. With
    // nobody there it ends, so that no process outlives its run.
    worker_report run() {
        for (bool first = true;; first = false) {
            try {
                join();
            } catch (const stop_requested&) {
                return final_report();  // the run ended while this worker fetched its state
            } catch (const error& e) {
                if (first) throw;
                throw error("worker " + std::to_string(report_.id) + ": the trainer at " + options_.rendezvous +
                            " stopped answering heartbeats, and no trainer welcomed this worker back: " + e.what());
            }
            std::printf("worker %llu | stage %d | ready; new workers may join through it: --rendezvous %s\n",
                        static_cast<unsigned long long>(report_.id), report_.stage,
                        bound_address(state_server_).c_str());
            std::fflush(stdout);
            serve_with_heartbeats();
            if (!trainer_gone_) return final_report();
            std::fprintf(stderr,
                         "worker %llu: the trainer at %s stopped answering heartbeats for %g s; saying hello there "
                         "again for up to %g s (--connect-timeout-s)\n",
                         static_cast<unsigned long long>(report_.id), options_.rendezvous.c_str(),
                         welcome_.expiry_seconds, options_.connect_timeout_seconds);
            ++report_.reconnects;
            // Back under its id, for its stage; through a fresh socket, so that nothing queued
            // for the dead trainer reaches the new one.
            options_.requested_id = static_cast<std::int64_t>(welcome_.id);
            options_.requested_stage = welcome_.stage;
            trainer_gone_ = false;
            stopping_ = false;
            deferred_.clear();
            calls_ = make_dealer_with_identity(context_, "worker-calls");
            endpoint_ = tcp_endpoint(options_.rendezvous, "--rendezvous", false);
            calls_.connect(endpoint_);
        }
    }

private:
    using clock = std::chrono::steady_clock;
    struct stop_requested {};  // the trainer said stop while this worker was fetching state

    // Serves the trainer's calls, beating the heartbeat on a second thread meanwhile.
    void serve_with_heartbeats() {
        std::thread beat([this] { heartbeat_loop(); });
        try {
            serve();
        } catch (const stop_requested&) {
            // the run ended while this worker fetched a state (on a move, or again)
        } catch (...) {
            stopping_ = true;
            beat.join();
            throw;
        }
        stopping_ = true;
        beat.join();
    }

    worker_report final_report() {
        report_.dropped_messages = guard_.dropped();
        report_.banned_strangers = guard_.banned();
        if (image_server_.served() > 0) report_.served["state"] = image_server_.served();
        return report_;
    }

    // While fetching, the trainer's messages are set aside for afterwards (a stop ends the
    // fetch at once), so that a run ending mid-fetch ends this worker too.
    void poll_trainer() {
        while (auto bytes = receive(calls_)) {
            if (message_reader(*bytes, "the trainer").kind() == message_kind::stop) throw stop_requested{};
            deferred_.push_back(std::move(*bytes));
        }
    }

    // Says hello to --rendezvous: the trainer answers with a welcome; any worker of the run
    // answers with the trainer's address (redirect), where the hello goes next. So a new
    // worker may join through whichever member it knows of.
    void join() {
        std::string rendezvous = options_.rendezvous;
        const auto deadline = clock::now() + std::chrono::duration<double>(options_.connect_timeout_seconds);
        for (int hop = 0; hop < 4; ++hop) {
            message_writer hello(message_kind::hello);
            write(hello, hello_message{options_.requested_id, options_.requested_stage, bound_address(state_server_),
                                       static_cast<std::int64_t>(::getpid())});
            send(calls_, hello.take());
            std::optional<std::string> redirected_to;
            while (!redirected_to && clock::now() < deadline) {
                zmq::socket_t* sockets[] = {&calls_};
                if (!wait_readable(sockets, std::chrono::milliseconds(100))[0]) continue;
                const auto bytes = receive(calls_);
                if (!bytes) continue;
                message_reader r(*bytes, "the rendezvous " + rendezvous);
                if (r.kind() == message_kind::redirect) {
                    redirected_to = r.get_string("trainer address");
                    r.finish();
                    continue;
                }
                if (r.kind() != message_kind::welcome) continue;
                welcome_ = read_welcome(r);
                report_.id = welcome_.id;
                trainer_address_ = rendezvous;
                start_stage();
                return;
            }
            if (!redirected_to) break;
            calls_.disconnect(endpoint_);
            endpoint_ = tcp_endpoint(*redirected_to, "the trainer address a peer redirected to", false);
            calls_.connect(endpoint_);
            report_.joined_through = rendezvous;
            rendezvous = *redirected_to;
        }
        throw error("cannot reach the rendezvous at " + options_.rendezvous + " (--rendezvous): no welcome within " +
                    std::to_string(options_.connect_timeout_seconds) +
                    " s; is the trainer (or a worker of the run) there, and can this host reach that port?");
    }
    // A newcomer that says hello to this worker rather than the trainer is told where the
    // trainer is.
    void redirect(const routed_message& m) {
        message_writer w(message_kind::redirect);
        w.put_string(trainer_address_);
        static_cast<void>(send_to(state_server_, m.peer, w.take()));
    }
    // Builds the stage's service and fills its state: the initial weights, or the peers'.
    void start_stage() {
        if (report_.stage >= 0 && report_.stage != welcome_.stage) report_.earlier_stages.push_back(report_.stage);
        report_.stage = welcome_.stage;
        image_server_.forget();
        service_ = std::make_unique<stage_service>(welcome_.model, welcome_.stage, welcome_.stages, welcome_.units,
                                                   welcome_.optimizer);
        if (welcome_.peers.empty()) {
            require(welcome_.step == 0, "welcome: peers", "none", "a stage past step 0 has peers holding its state");
            if (!welcome_.init_from.empty()) service_->load_weights(io::read_safetensors(welcome_.init_from));
        } else {
            fetch_state(welcome_.peers);
        }
        step_ = service_->step();
        message_writer ready(message_kind::ready);
        ready.put(welcome_.id).put(service_->step());
        send(calls_, ready.take());
    }

    // The state image from the peers. Each is asked for the manifest first, which makes it
    // keep a snapshot of its state at that step; the chunks then come from all peers whose
    // snapshot has the newest step, one outstanding request per peer, so the image is one
    // step's however long the fetch takes while the stage trains on. A peer that does not
    // answer in time, or refuses, is banned for this fetch; one that no longer holds the
    // step's snapshot starts the fetch over. The trainer then brings the worker from that
    // step to the current one by replaying the steps' averaged gradients (trainer.hpp,
    // "catch-up").
    void fetch_state(const std::vector<peer_address>& peers) {
        fetch_bans_.clear();
        for (int attempt = 0; attempt < 5; ++attempt) {
            std::vector<std::pair<peer_address, zmq::socket_t>> links;
            for (const auto& p : peers) {
                if (fetch_bans_.contains(p.id)) continue;
                auto s = make_socket(context_, zmq::socket_type::dealer);
                s.connect(tcp_endpoint(p.address, "peer address", false));
                links.emplace_back(p, std::move(s));
            }
            if (links.empty()) break;
            // The newest step any peer holds. A peer asked just before its stage stepped is
            // asked once more: its snapshot then is of that step too, and it shares the load.
            std::vector<std::optional<state_manifest>> manifests;
            for (auto& [peer, link] : links) manifests.push_back(request_manifest(peer, link));
            std::optional<state_manifest> manifest;
            for (const auto& m : manifests)
                if (m && (!manifest || m->step > manifest->step)) manifest = m;
            if (!manifest) continue;
            std::vector<std::pair<peer_address, zmq::socket_t>> donors;
            for (std::size_t i = 0; i < links.size(); ++i) {
                auto& m = manifests[i];
                if (m && m->step < manifest->step) m = request_manifest(links[i].first, links[i].second);
                if (m && m->step == manifest->step) donors.push_back(std::move(links[i]));
            }
            service_->begin_restore(*manifest);
            if (fetch_chunks(donors, *manifest)) {
                service_->finish_restore();
                return;
            }
        }
        throw error("worker " + std::to_string(welcome_.id) + " of stage " + std::to_string(welcome_.stage) +
                    ": no peer handed out the stage's state (peers banned:" + banned_text() + ")");
    }
    // A peer that failed to hand out state is not asked again during this fetch.
    void ban_peer(worker_id id) {
        fetch_bans_.insert(id);
        report_.banned_peers.insert(id);
    }
    std::string banned_text() const {
        std::string t;
        for (const worker_id p : fetch_bans_) t += " " + std::to_string(p);
        return t.empty() ? " none" : t;
    }
    std::optional<std::vector<std::byte>> await(zmq::socket_t& link) {
        zmq::socket_t* sockets[] = {&link};
        const auto timeout = std::chrono::milliseconds(static_cast<long>(1e3 * options_.fetch_timeout_seconds));
        if (!wait_readable(sockets, timeout)[0]) return std::nullopt;
        return receive(link);
    }
    std::optional<state_manifest> request_manifest(const peer_address& peer, zmq::socket_t& link) {
        serve_peers(/*fetching=*/true);
        poll_trainer();
        send(link, state_request_for(0, 0, 0));
        const auto bytes = await(link);
        if (!bytes) {
            ban_peer(peer.id);
            return std::nullopt;
        }
        message_reader r(*bytes, "peer " + std::to_string(peer.id));
        if (r.kind() != message_kind::state_reply) {  // refused: it serves another stage now
            ban_peer(peer.id);
            return std::nullopt;
        }
        auto m = read_manifest(r);
        r.finish();
        return m;
    }
    bool fetch_chunks(std::vector<std::pair<peer_address, zmq::socket_t>>& links, const state_manifest& manifest) {
        const std::uint64_t total = manifest.total(), chunk = std::max<std::uint64_t>(1, welcome_.chunk_elements);
        std::vector<std::uint64_t> todo;
        for (std::uint64_t at = 0; at < total; at += chunk) todo.push_back(at);
        std::map<std::size_t, std::pair<std::uint64_t, clock::time_point>> asked;  // link -> chunk, when
        const auto timeout = std::chrono::duration<double>(options_.fetch_timeout_seconds);
        while (!todo.empty() || !asked.empty()) {
            for (std::size_t i = 0; i < links.size() && !todo.empty(); ++i) {
                if (asked.contains(i) || fetch_bans_.contains(links[i].first.id)) continue;
                const std::uint64_t at = todo.back();
                todo.pop_back();
                send(links[i].second, state_request_for(manifest.step, at, std::min(chunk, total - at)));
                asked[i] = {at, clock::now()};
            }
            if (asked.empty()) return false;  // every peer banned
            serve_peers(/*fetching=*/true);
            poll_trainer();
            std::vector<zmq::socket_t*> sockets;
            std::vector<std::size_t> which;
            for (const auto& [i, a] : asked) {
                sockets.push_back(&links[i].second);
                which.push_back(i);
            }
            const auto ready = wait_readable(sockets, std::chrono::milliseconds(50));
            for (std::size_t k = 0; k < which.size(); ++k) {
                const std::size_t i = which[k];
                if (!ready[k]) {
                    if (clock::now() - asked[i].second > timeout) {
                        ban_peer(links[i].first.id);
                        todo.push_back(asked[i].first);
                        asked.erase(i);
                    }
                    continue;
                }
                const auto bytes = receive(links[i].second);
                if (!bytes) continue;
                message_reader r(*bytes, "peer " + std::to_string(links[i].first.id));
                if (r.kind() != message_kind::state_reply) return false;  // its snapshot is gone: start over
                const auto step = r.get<std::uint64_t>("step");
                const auto offset = r.get<std::uint64_t>("offset");
                const auto values = r.get_floats("state");
                r.finish();
                if (step != manifest.step) return false;  // the stage stepped: start over
                require(offset == asked[i].first, "state chunk offset", offset, "must be the one asked for");
                service_->write_state(offset, values);
                ++report_.chunks_from[links[i].first.id];
                asked.erase(i);
            }
        }
        return true;
    }

    void serve() {
        while (!trainer_gone_) {
            while (!deferred_.empty()) {
                const std::vector<std::byte> bytes = std::move(deferred_.front());
                deferred_.pop_front();
                message_reader r(bytes, "the trainer");
                handle(r);
            }
            image_server_.forget_if_idle();
            zmq::socket_t* sockets[] = {&calls_, &state_server_};
            const auto ready = wait_readable(sockets, std::chrono::milliseconds(100));
            if (ready[1]) serve_peers(/*fetching=*/false);
            if (!ready[0]) continue;
            while (auto bytes = receive(calls_)) {
                message_reader r(*bytes, "the trainer");
                if (r.kind() == message_kind::stop) return;
                handle(r);
                serve_peers(/*fetching=*/false);  // between calls, so a busy worker still hands out state
            }
        }
    }
    // Peers' messages to the state server: a newcomer's hello (sent on to the trainer) or a
    // state request. While this worker fetches its own state (`fetching`), requests are refused
    // at once rather than left waiting for their timeout: what it holds is half written, or
    // another stage's. Anything else, or a message cut short, is a stranger's: dropped and
    // counted, and a peer that keeps sending them is banned (net/peer_guard.hpp).
    void serve_peers(bool fetching) {
        for (int n = 0; n < peer_guard::messages_per_poll; ++n) {
            const auto m = receive_from(state_server_, guard_.counter());
            if (!m) break;
            if (guard_.refuses(m->peer)) continue;
            try {
                message_reader r(m->bytes, "peer '" + printable_peer(m->peer) + "'");
                switch (r.kind()) {
                    case message_kind::hello:
                        static_cast<void>(read_hello(r));
                        redirect(*m);
                        break;
                    case message_kind::state_request: {
                        const state_request request = read_state_request(r);
                        if (fetching) refuse(m->peer, "worker " + std::to_string(welcome_.id) + " is fetching its own state");
                        else serve_state(m->peer, request);
                        break;
                    }
                    default:
                        throw invalid_argument("message kind", std::string(to_string(r.kind())),
                                               "a worker's state server takes hello and state requests");
                }
            } catch (const std::exception& e) {
                guard_.drop(m->peer, e.what());
            }
        }
        guard_.ban_repeat_offenders();
    }
    void refuse(const std::string& peer, const std::string& why) {
        static_cast<void>(send_to(state_server_, peer, refusal(service_ ? service_->step() : 0, why)));
    }
    // A request for the manifest (count 0), or a chunk of step `step`'s state image, of
    // this worker's stage.
    [[nodiscard]] std::vector<std::byte> state_request_for(std::uint64_t step, std::uint64_t offset,
                                                           std::uint64_t count) const {
        return write_state_request({.stage = welcome_.stage, .step = step, .offset = offset, .count = count});
    }
    // Answers a peer's state request (net/state_server.hpp).
    void serve_state(const std::string& peer, const state_request& q) {
        static_cast<void>(send_to(state_server_, peer, image_server_.answer(*service_, q)));
    }

    void play_faults(std::uint64_t step, message_kind kind) {
        const auto& f = welcome_.faults;
        const bool phase_matches = f.fail_phase == worker_faults::phase::any ||
                                   (f.fail_phase == worker_faults::phase::forward && kind == message_kind::forward) ||
                                   (f.fail_phase == worker_faults::phase::backward && kind == message_kind::backward);
        // At or after the step: the router decides which worker gets which call, so a worker
        // may have no call (of that kind) in the step named.
        if (f.fail_step >= 0 && static_cast<std::int64_t>(step) >= f.fail_step && phase_matches) {
            std::fprintf(stderr, "worker %llu: failing at step %llu during %s (--fail)\n",
                         static_cast<unsigned long long>(welcome_.id), static_cast<unsigned long long>(step),
                         std::string(to_string(kind)).c_str());
            std::fflush(stderr);
            std::raise(SIGKILL);
        }
        if (f.stall_step >= 0 && static_cast<std::int64_t>(step) >= f.stall_step && !stalled_) {
            stalled_ = true;
            std::this_thread::sleep_for(std::chrono::duration<double>(f.stall_seconds));
        }
    }

    void handle(message_reader& r) {
        if (r.kind() == message_kind::rejoin) {
            const auto stage = r.get<std::int32_t>("stage");
            const auto first = r.get<int>("units first");
            const auto last = r.get<int>("units last");
            welcome_.step = r.get<std::uint64_t>("step");
            welcome_.peers = read_peers(r);
            r.finish();
            welcome_.stage = stage;
            welcome_.units = {first, last};
            start_stage();
            return;
        }
        const auto call = r.get<std::uint64_t>("call");
        const auto step = r.get<std::uint64_t>("step");
        const auto kind = r.kind();
        play_faults(step, kind);
        message_writer reply = [&] {
            try {
                message_writer w = answer(r, kind, call, step);
                ++report_.served[std::string(to_string(kind))];
                return w;
            } catch (const call_refused& refusal) {
                ++report_.refused;
                message_writer w(message_kind::refused);
                w.put(call).put(service_->step()).put_string(refusal.what());
                return w;
            }
        }();
        send(calls_, reply.take());
        step_ = service_->step();
    }

    // The reply to one call: its id, the seconds it computed, then its results. A worker made
    // slow (--slow) waits out the extra time before it measures, so the trainer's router sees
    // a slower worker, as it would on slower hardware.
    message_writer answer(message_reader& r, message_kind kind, std::uint64_t call, std::uint64_t step) {
        const auto started = clock::now();
        const auto block = welcome_.compress_block;
        const auto seconds = [&] {
            const double computed = std::chrono::duration<double>(clock::now() - started).count();
            if (welcome_.faults.slow_factor > 1)
                std::this_thread::sleep_for(std::chrono::duration<double>((welcome_.faults.slow_factor - 1) * computed));
            return std::chrono::duration<double>(clock::now() - started).count();
        };
        switch (kind) {
            case message_kind::forward: {
                const stage_input input = read_input(r);
                r.finish();
                const auto out = service_->forward(step, input);
                message_writer w(message_kind::forward_reply);
                w.put(call).put(seconds()).put_floats(out, block);
                return w;
            }
            case message_kind::backward: {
                const auto microbatch = r.get<std::int32_t>("micro-batch");
                const stage_input input = read_input(r);
                const auto grad_output = r.get_floats("output gradient");
                const auto targets = r.get_ints("targets");
                const auto scale = r.get<double>("scale");
                r.finish();
                const auto result = service_->backward(step, microbatch, input, grad_output, targets, scale);
                message_writer w(message_kind::backward_reply);
                w.put(call).put(seconds()).put(result.loss).put_floats(result.grad_input, block);
                return w;
            }
            case message_kind::collect: {
                const auto microbatches = r.get_ints("micro-batches");
                r.finish();
                const auto sum = service_->collect(step, microbatches);
                message_writer w(message_kind::collect_reply);
                w.put(call).put(seconds()).put_floats(sum);  // gradients for averaging travel exact
                return w;
            }
            case message_kind::apply: {
                const auto lr = r.get<double>("lr");
                const auto clip = r.get<double>("clip");
                const auto gradient = r.get_floats("gradient");
                r.finish();
                service_->apply(step, lr, clip, gradient);
                message_writer w(message_kind::apply_reply);
                w.put(call).put(seconds()).put(service_->step());
                return w;
            }
            default:
                throw call_refused("a worker does not serve " + std::string(to_string(kind)) + " messages");
        }
    }
    static stage_input read_input(message_reader& r) {
        stage_input in;
        in.rows = r.get<std::int32_t>("rows");
        in.tokens = r.get_ints("tokens");
        in.activations = r.get_floats("activations");
        return in;
    }

    void heartbeat_loop() {
        auto beat = make_dealer_with_identity(context_, "worker-beat");
        beat.connect(endpoint_);
        auto last_ack = clock::now();
        const worker_id id = welcome_.id;  // the main thread changes only the stage and step on a rejoin
        const auto interval = std::chrono::duration<double>(welcome_.heartbeat_seconds);
        const auto expiry = std::chrono::duration<double>(welcome_.expiry_seconds);
        auto next = clock::now();
        while (!stopping_) {
            if (clock::now() >= next) {
                message_writer w(message_kind::heartbeat);
                w.put(id).put(step_.load());
                send(beat, w.take());
                next = clock::now() + std::chrono::duration_cast<clock::duration>(interval);
            }
            zmq::socket_t* sockets[] = {&beat};
            if (wait_readable(sockets, std::chrono::milliseconds(50))[0])
                while (receive(beat)) last_ack = clock::now();
            if (clock::now() - last_ack > expiry) {
                trainer_gone_ = true;
                return;
            }
        }
    }

    worker_options options_;
    std::string endpoint_;         // the trainer's, once a peer redirected this worker there
    std::string trainer_address_;  // HOST:PORT, told to newcomers that say hello to this worker
    zmq::context_t context_;
    zmq::socket_t calls_;
    zmq::socket_t state_server_;
    welcome_message welcome_;
    std::unique_ptr<stage_service> service_;
    state_image_server image_server_{4 * options_.fetch_timeout_seconds};  // what joining peers fetch
    std::deque<std::vector<std::byte>> deferred_;  // the trainer's messages that came during a fetch
    std::set<worker_id> fetch_bans_;               // peers this fetch does without
    worker_report report_;
    std::atomic<std::uint64_t> step_{0};
    std::atomic<bool> stopping_{false};
    std::atomic<bool> trainer_gone_{false};
    bool stalled_ = false;
    peer_guard guard_{"swarm worker"};  // strangers' messages to the state server
};

}  // namespace weft::swarm::net
