// Runs one pipeline rank's row of a lowered program over its stage runners and the pipeline
// communicator: RECVs are posted a few actions ahead so data arrives while the rank
// computes, SENDs are non-blocking, F/B/I/W call the runners, and the stage-wide actions
// (REDUCE_GRAD, UNSHARD, RESHARD) go to the caller, who owns the sharding. The loop holds
// no training state: a step's messages live in it only while run() runs, and its activations
// in the runners.
//
// Messages go on channels: communicators over the same pipeline ranks. A communicator that
// pairs messages by tag carries them all on one. One that pairs them per peer in posting
// order and runs them on one stream (NCCL) needs a channel per route, (sender, receiver,
// direction), at each rank (sched/message_channels.hpp): then each route must keep its
// order, which the constructor checks with sched::check_channel_order, and each send and
// receive is launched as it is posted (launch_now).
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <functional>
#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/comm/watchdog.hpp"
#include "weft/core/deferred_value.hpp"
#include "weft/core/error.hpp"
#include "weft/exec/compute_timing.hpp"
#include "weft/exec/action_key.hpp"
#include "weft/exec/kernel_progress.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/channel_order.hpp"
#include "weft/sched/message_channels.hpp"
#include "weft/sched/program.hpp"
#include "weft/train/stage_runner.hpp"

namespace weft::train {

// What the program loop asks of its caller for a stage: its stage-wide actions, and a hook
// before every compute action on it (ZeRO-3 waits there for the stage's parameters).
template <class A>
concept stage_actions = requires(A& a, int stage) {
    a.reduce_grad(stage);
    a.unshard(stage);
    a.reshard(stage);
    a.before_compute(stage);
};

// A caller that also hears, on every weight-gradient action of a stage, of each layer's
// gradient range as the action has added all it adds to it (nn/final_gradients.hpp), with
// whether it was the stage's last of the step (then the range is final): to start reducing
// it while the backward goes on. Only where the backend runs each action as it is called:
// one that records actions and replays them (exec::cuda's graphs) would not call back on
// replay.
template <class A>
concept hears_final_gradients = requires(A& a, int stage, nn::gradient_range range, bool last) {
    a.gradients_final(stage, range, last);
};

// What one run of a program did on this rank.
struct program_report {
    double loss_sum = 0;               // the last stage's mean loss (0 on other ranks)
    double compute_seconds = 0;        // time in F, B, I, W
    // Of that, per kind (host-timed backends only; 0 where the device times the compute): the
    // costs the timed simulator is given to set the measured bubble beside its own.
    double forward_seconds = 0;
    double backward_seconds = 0;  // full backwards (B)
    double backward_input_seconds = 0;
    double backward_weight_seconds = 0;
    double program_seconds = 0;        // wall time of the whole row
    std::size_t peak_stashed = 0;      // most micro-batches held at once, over all stages
    std::size_t peak_activation_bytes = 0;
};

template <class Model, class Backend, communicator Comm>
class program_loop {
public:
    using runner = stage_runner<Model, Backend>;
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;
    using batch_type = typename Model::batch;
    using model_config = typename Model::config;

    // `lowered`: a checked program with communication actions; this rank is `pipeline_rank`
    // of it. Micro-batches hold `rows_per_microbatch` batch rows each.
    // `routes`: the channel of each route, when given (a forward-only program run on the
    // channels of the training program it came from); otherwise the program's own.
    program_loop(sched::program lowered, int pipeline_rank, const model_config& model, int rows_per_microbatch,
                 int recv_lookahead, std::optional<sched::message_channels> routes = std::nullopt)
        : program_(std::move(lowered)),
          pipeline_rank_(pipeline_rank),
          model_(model),
          rows_per_microbatch_(rows_per_microbatch),
          recv_lookahead_(recv_lookahead) {
        require(program_.lowered, "program", "compute-only", "the loop runs a lowered program (sched::lower)");
        require(pipeline_rank >= 0 && pipeline_rank < program_.num_ranks, "pipeline rank", pipeline_rank,
                "must be a rank of the program, in [0, " + std::to_string(program_.num_ranks) + ")");
        require(rows_per_microbatch >= 1, "rows per micro-batch", rows_per_microbatch, "must be at least 1");
        require(recv_lookahead >= 0, "recv_lookahead", recv_lookahead, "must be >= 0");
        for (const auto& row : program_.ranks)
            for (const auto& a : row)
                if (a.kind == sched::action_kind::B || a.kind == sched::action_kind::I ||
                    a.kind == sched::action_kind::W || a.kind == sched::action_kind::OVERLAP_F_B)
                    forward_only_ = false;
        const auto& mine = program_.ranks[static_cast<std::size_t>(pipeline_rank_)];
        for (std::size_t i = 0; i < mine.size(); ++i)
            if (mine[i].kind == sched::action_kind::B || mine[i].kind == sched::action_kind::W ||
                mine[i].kind == sched::action_kind::OVERLAP_F_B)
                last_weight_action_[mine[i].stage] = i;
        const long long tag_space = 2LL * program_.num_stages * program_.num_microbatches;
        require(tag_space <= comm::max_tag + 1LL, "stages*microbatches", tag_space / 2,
                "message tags must fit in 0.." + std::to_string(comm::max_tag));
        if constexpr (comm::matching_of<Comm> == comm::message_matching::in_posting_order) {
            if (const auto order = sched::check_channel_order(program_); !order.ok)
                throw error("program: its messages are out of order for a communicator that pairs them in posting "
                            "order, without tags (" + std::string(comm::to_string(comm::matching_of<Comm>)) +
                            "): " + order.message);
        }
        if (routes) {
            for (const auto& route : sched::routes_of(program_)) static_cast<void>(routes->of(route));
            routes_ = std::move(*routes);
        } else {
            routes_ = own_routes(program_);
        }
    }

    // The channels a lowered program runs on by itself (no routes given): one per route at a
    // rank for a communicator that pairs messages in posting order, else one.
    [[nodiscard]] static sched::message_channels own_routes(const sched::program& lowered) {
        if constexpr (comm::matching_of<Comm> == comm::message_matching::in_posting_order)
            return sched::one_channel_per_route(lowered);
        else
            return sched::one_channel(lowered);
    }

    // How many communicators run() takes: one for a communicator that pairs messages by tag,
    // one per route at a rank for one that pairs them in posting order.
    [[nodiscard]] int channel_count() const { return routes_.count; }
    [[nodiscard]] const sched::message_channels& routes() const { return routes_; }

    [[nodiscard]] const sched::program& program() const { return program_; }
    // A program of forwards only (evaluation, sched::forward_only): each forward's activations
    // are dropped at once, and the last stage computes the loss without its gradient.
    [[nodiscard]] bool forward_only() const { return forward_only_; }
    [[nodiscard]] int pipeline_rank() const { return pipeline_rank_; }

    // Runs this rank's row on `batch`. Micro-batch j takes batch rows [first_row + j * rows,
    // ...), rows = rows_per_microbatch. `runners` holds this rank's stages by index; `actions`
    // takes the stage-wide actions. Collective over `pipeline` (one rank per pipeline rank),
    // which carries every message: only for a communicator that matches by tag.
    template <stage_actions Actions>
        requires(comm::matching_of<Comm> == comm::message_matching::by_tag)
    program_report run(const batch_type& batch, int first_row, std::map<int, runner>& runners, Comm& pipeline,
                       Actions& actions) {
        Comm* const one[] = {&pipeline};
        return run(batch, first_row, runners, std::span<Comm* const>(one), actions);
    }

    // As above, with the messages of each route on its channel (routes()): `channels` holds
    // channel_count() communicators over the same pipeline ranks, each a communicator of its
    // own where they pair messages in posting order.
    template <stage_actions Actions>
    program_report run(const batch_type& batch, int first_row, std::map<int, runner>& runners,
                       std::span<Comm* const> channels, Actions& actions) {
        require(channels.size() == static_cast<std::size_t>(channel_count()), "channels", channels.size(),
                "must be this program's channel_count() = " + std::to_string(channel_count()));
        if constexpr (comm::matching_of<Comm> == comm::message_matching::in_posting_order)
            for (std::size_t i = 0; i < channels.size(); ++i)
                for (std::size_t j = 0; j < i; ++j)
                    require(channels[i] != channels[j], "channel " + std::to_string(i), "channel " + std::to_string(j) +
                            "'s communicator", "must be a communicator of its own: this one pairs messages in "
                            "posting order, so routes sharing it would take each other's data and wait for each "
                            "other (split the pipeline group once per channel)");
        const routed pipeline{channels, &routes_};
        step_messages messages;
        program_report report;
        const auto start = std::chrono::steady_clock::now();
        const auto& row = program_.ranks[static_cast<std::size_t>(pipeline_rank_)];
        // What a communication timeout happened in: thrown timeout_errors (comm::local, nccl)
        // get it below; the watchdog (comm::mpi) reads it from the published activity.
        const sched::action* current = nullptr;
        const comm::activity_scope activity(this, &describe_activity);
        // The CPU kernels move this step's messages on between them (comm::mpi::progress).
        const std::function<void()> progress = [channels] {
            if constexpr (requires(Comm& c) { c.progress(); })
                for (Comm* channel : channels) channel->progress();
        };
        const exec::kernel_progress_scope progress_during_compute(progress);
        try {
            std::size_t posted_until = 0;
            for (std::size_t i = 0; i < row.size(); ++i) {
                for (; posted_until < row.size() && posted_until <= i + static_cast<std::size_t>(recv_lookahead_);
                     ++posted_until)
                    post_recv(row[posted_until], runners, pipeline, messages);
                current = &row[i];
                comm::activity_scope::set_item(current);
                execute(row[i], finishes_gradients(i), batch, first_row, runners, pipeline, actions, messages,
                        report);
            }
            current = nullptr;
            comm::activity_scope::set_item(nullptr);
            for (auto& send : messages.sends) send.request.wait();
            for (const auto& loss : messages.losses)
                report.loss_sum += static_cast<double>(loss.get()) / program_.num_microbatches;
            if constexpr (exec::device_timed<Backend>)
                for_each_backend(runners, [&](Backend& b) { report.compute_seconds += b.take_compute_seconds(); });
        } catch (const comm::timeout_error& e) {
            clear_after_failure(runners);
            throw e.with_action(describe_activity(this, current));
        } catch (...) {
            clear_after_failure(runners);
            throw;
        }
        report.program_seconds = seconds_since(start);
        std::size_t left = 0;
        for (const auto& [index, r] : runners) left += r.stashed();
        if (left != 0)
            throw error("the program left " + std::to_string(left) +
                        " micro-batches stashed; every forward needs its backward in the same step");
        return report;
    }

private:
    enum class direction { forward = 0, backward = 1 };
    // The communicator of each route.
    struct routed {
        std::span<Comm* const> channels;
        const sched::message_channels* routes;
        [[nodiscard]] Comm& of(direction dir, int sender, int receiver) const {
            const int c = routes->of({sender, receiver, dir == direction::backward});
            return *channels[static_cast<std::size_t>(c)];
        }
    };
    struct in_flight {
        matrix buffer;
        typename Comm::request request;
    };
    // One step's messages: outputs waiting for their SEND or the next local stage, posted
    // receives, and sends in flight.
    struct step_messages {
        std::map<std::pair<int, int>, matrix> outputs;      // F output by (stage, mb)
        std::map<std::pair<int, int>, matrix> input_grads;  // B/I output by (stage, mb)
        std::map<std::pair<int, int>, matrix> loss_grads;   // d loss / d logits of the last stage
        std::map<std::tuple<int, int, int>, in_flight> recvs;  // (direction, stage, mb)
        std::vector<in_flight> sends;
        // The last stage's micro-batch losses in F order, read once the step's actions are all
        // queued: a device backend's loss (exec::deferred_loss_kernels) then stops its queue
        // once a step rather than at every micro-batch.
        std::vector<deferred_value<scalar>> losses;
    };

    // Adds a compute action's host time to its kind's total (F, B, I or W), as it ends. A
    // device-timed backend returns before its work is done: its kinds stay 0.
    class kind_timer {
    public:
        kind_timer(sched::action_kind kind, program_report& report)
            : kind_(kind), report_(report), start_(std::chrono::steady_clock::now()) {}
        kind_timer(const kind_timer&) = delete;
        kind_timer& operator=(const kind_timer&) = delete;
        ~kind_timer() {
            if constexpr (exec::device_timed<Backend>) return;
            const double seconds = seconds_since(start_);
            switch (kind_) {
                case sched::action_kind::F: report_.forward_seconds += seconds; break;
                case sched::action_kind::B: report_.backward_seconds += seconds; break;
                case sched::action_kind::I: report_.backward_input_seconds += seconds; break;
                case sched::action_kind::W: report_.backward_weight_seconds += seconds; break;
                default: break;
            }
        }

    private:
        sched::action_kind kind_;
        program_report& report_;
        std::chrono::steady_clock::time_point start_;
    };

    static double seconds_since(std::chrono::steady_clock::time_point start) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    // A compute action's time (exec/compute_timing.hpp): on the host around it, or, for a
    // backend that queues its work and returns, marked on the backend and taken after the
    // program (take_compute_seconds, in run()).
    static std::chrono::steady_clock::time_point begin_compute(Backend& backend) {
        if constexpr (exec::device_timed<Backend>) backend.begin_compute_interval();
        return std::chrono::steady_clock::now();
    }
    static void end_compute(Backend& backend, std::chrono::steady_clock::time_point start, program_report& report) {
        if constexpr (exec::device_timed<Backend>)
            backend.end_compute_interval();
        else
            report.compute_seconds += seconds_since(start);
    }
    // Each backend of this rank's stages once (interleaved stages share one); `take` returns
    // its seconds or discards its marks.
    template <class Take>
    static void for_each_backend(std::map<int, runner>& runners, Take take) {
        std::vector<const Backend*> seen;
        for (auto& [index, r] : runners) {
            Backend& backend = r.backend();
            if (std::find(seen.begin(), seen.end(), &backend) != seen.end()) continue;
            seen.push_back(&backend);
            take(backend);
        }
    }

    // A program that threw leaves no stash and no open timing mark behind for the next one.
    static void clear_after_failure(std::map<int, runner>& runners) {
        for (auto& [index, r] : runners) r.clear();
        if constexpr (exec::device_timed<Backend>)
            for_each_backend(runners, [](Backend& b) { b.discard_compute_intervals(); });
    }

    static runner& find(std::map<int, runner>& runners, int stage, int rank) {
        const auto it = runners.find(stage);
        if (it == runners.end())
            throw invalid_argument("stage", stage, "is not run by pipeline rank " + std::to_string(rank));
        return it->second;
    }

    void post_recv(const sched::action& a, std::map<int, runner>& runners, const routed& pipeline,
                   step_messages& m) {
        using sched::action_kind;
        if (a.kind != action_kind::RECV_F && a.kind != action_kind::RECV_B) return;
        const bool forward = a.kind == action_kind::RECV_F;
        const auto& stage = find(runners, a.stage, pipeline_rank_).stage();
        const int peer_stage = forward ? a.stage - 1 : a.stage + 1;
        in_flight recv{matrix(Model::activation_rows(model_, rows_per_microbatch_),
                              forward ? stage.input_width() : stage.output_width()),
                       {}};
        const direction dir = forward ? direction::forward : direction::backward;
        const int source = program_.stage_rank[std::size_t(peer_stage)];
        Comm& channel = pipeline.of(dir, source, pipeline_rank_);
        recv.request = channel.irecv(as_writable_bytes(recv.buffer), source, tag(dir, a.stage, a.microbatch));
        launch_now(channel);
        m.recvs.emplace(std::tuple{forward ? 0 : 1, a.stage, a.microbatch}, std::move(recv));
    }

    template <class Actions>
    void execute(const sched::action& a, bool last_gradients, const batch_type& batch, int first_row,
                 std::map<int, runner>& runners, const routed& pipeline, Actions& actions, step_messages& m,
                 program_report& report) {
        using sched::action_kind;
        switch (a.kind) {
            case action_kind::F:
            case action_kind::B:
            case action_kind::I:
            case action_kind::W: {
                Backend& backend = find(runners, a.stage, pipeline_rank_).backend();
                const auto start = begin_compute(backend);
                compute(a, last_gradients, batch, first_row, runners, actions, m, report);
                end_compute(backend, start, report);
                break;
            }
            case action_kind::OVERLAP_F_B: {
                // On the CPU backend the pair runs back to back; the overlap DualPipe gains is
                // compute hiding communication, which needs separate streams (CUDA).
                Backend& backend = find(runners, a.stage, pipeline_rank_).backend();
                const auto start = begin_compute(backend);
                compute(sched::forward_part(a), false, batch, first_row, runners, actions, m, report);
                compute(sched::backward_part(a), last_gradients, batch, first_row, runners, actions, m, report);
                end_compute(backend, start, report);
                break;
            }
            case action_kind::REDUCE_GRAD: actions.reduce_grad(a.stage); break;
            case action_kind::UNSHARD: actions.unshard(a.stage); break;
            case action_kind::RESHARD: actions.reshard(a.stage); break;
            case action_kind::SEND_F: send(direction::forward, a, m.outputs, pipeline, m); break;
            case action_kind::SEND_B: send(direction::backward, a, m.input_grads, pipeline, m); break;
            case action_kind::RECV_F: receive(0, a, m.outputs, a.stage - 1, m); break;
            case action_kind::RECV_B: receive(1, a, m.input_grads, a.stage + 1, m); break;
            default:
                throw invalid_argument("action", sched::to_string(a),
                                       "the engine runs F, B, I, W, OVERLAP_F_B, SEND_F/B, RECV_F/B, REDUCE_GRAD, "
                                       "UNSHARD and RESHARD");
        }
    }

    template <class Actions>
    void compute(const sched::action& a, bool last_gradients, const batch_type& batch, int first_row,
                 std::map<int, runner>& runners, Actions& actions, step_messages& m, program_report& report) {
        using sched::action_kind;
        actions.before_compute(a.stage);
        const kind_timer timed(a.kind, report);
        runner& r = find(runners, a.stage, pipeline_rank_);
        const int mb = a.microbatch;
        const int rows = rows_per_microbatch_;
        const int mb_first_row = first_row + mb * rows;
        switch (a.kind) {
            case action_kind::F: {
                matrix output =
                    r.is_first() ? r.forward(mb, batch, mb_first_row, rows)
                                 : r.forward(mb, take(m.outputs, a.stage - 1, mb, "F needs the previous stage's output"));
                if (forward_only_) r.discard(mb);
                if (r.is_last()) {
                    auto result = r.loss(output, batch, mb_first_row, rows, scalar{1} / program_.num_microbatches);
                    m.losses.emplace_back(std::move(result.loss));
                    if (!forward_only_) m.loss_grads.emplace(std::pair{a.stage, mb}, std::move(result.dlogits));
                } else {
                    m.outputs.emplace(std::pair{a.stage, mb}, std::move(output));
                }
                note_peaks(runners, report);
                break;
            }
            case action_kind::B:
            case action_kind::I: {
                matrix grad_output = r.is_last() ? take(m.loss_grads, a.stage, mb, "B needs the loss gradient")
                                                 : take(m.input_grads, a.stage + 1, mb,
                                                        "B needs the next stage's input gradient");
                matrix grad_input =
                    a.kind == action_kind::B
                        ? with_final_gradients(actions, a.stage, last_gradients,
                                               [&](auto&& on_final) { return r.backward(mb, std::move(grad_output), on_final); })
                        : r.backward_input(mb, std::move(grad_output));
                if (!r.is_first()) m.input_grads.emplace(std::pair{a.stage, mb}, std::move(grad_input));
                note_peaks(runners, report);
                break;
            }
            case action_kind::W:
                with_final_gradients(actions, a.stage, last_gradients,
                                     [&](auto&& on_final) { r.backward_weight(mb, on_final); });
                break;
            default: throw invalid_argument("compute action", sched::to_string(a), "expected F, B, I or W");
        }
    }

    // A forward adds activations, and so does an input backward I: it drops what only it
    // needed but keeps the output gradients W needs, which may be more. W and B free an entry;
    // under full recompute B and I first rebuild one, which the runner reports. So the peaks
    // are seen right after F, B and I; sampling after every action would walk the stashes for
    // nothing.
    static void note_peaks(std::map<int, runner>& runners, program_report& report) {
        std::size_t live = 0, bytes = 0;
        for (auto& [index, each] : runners) {
            live += each.stashed();
            // A backward that rebuilt activations held more inside than after it (the others
            // do not change during one action).
            bytes += std::max(each.stashed_bytes(), each.take_peak_inside_backward());
        }
        report.peak_stashed = std::max(report.peak_stashed, live);
        report.peak_activation_bytes = std::max(report.peak_activation_bytes, bytes);
    }

    // Whether row action i is its stage's last B or W of the step: after it the stage's
    // gradients are final.
    [[nodiscard]] bool finishes_gradients(std::size_t i) const {
        const auto& a = program_.ranks[static_cast<std::size_t>(pipeline_rank_)][i];
        const auto it = last_weight_action_.find(a.stage);
        return it != last_weight_action_.end() && it->second == i;
    }

    // Runs backward(on_final) with a callback that hands each gradient range the action
    // finishes to the caller (hears_final_gradients), saying whether it is the stage's last
    // weight-gradient action of the step; with none where the caller does not listen or the
    // backend replays recorded work.
    template <class Actions, class Backward>
    static decltype(auto) with_final_gradients(Actions& actions, int stage, bool last_gradients, Backward&& backward) {
        if constexpr (hears_final_gradients<Actions> && !exec::records_actions<Backend>) {
            return backward([&actions, stage, last_gradients](nn::gradient_range range) {
                actions.gradients_final(stage, range, last_gradients);
            });
        } else {
            return backward(nn::ignore_final_gradients{});
        }
    }

    void send(direction dir, const sched::action& a, std::map<std::pair<int, int>, matrix>& source,
              const routed& pipeline, step_messages& m) {
        const int peer_stage = dir == direction::forward ? a.stage + 1 : a.stage - 1;
        in_flight out{take(source, a.stage, a.microbatch, "SEND needs the data its compute produced"), {}};
        const int dest = program_.stage_rank[std::size_t(peer_stage)];
        Comm& channel = pipeline.of(dir, pipeline_rank_, dest);
        out.request = channel.isend(as_bytes(out.buffer), dest, tag(dir, peer_stage, a.microbatch));
        launch_now(channel);
        m.sends.push_back(std::move(out));
    }

    // A communicator that batches what is posted until a wait (comm::nccl) launches the batch
    // now, so that every send and receive is a group of its own on its route's stream. A send
    // left unlaunched while this rank blocks elsewhere never reaches the peer waiting for it;
    // a receive posted ahead, launched in one group with the one waited for, makes that wait
    // last until the later message comes, which may need this rank first
    // (tests/support/rendezvous_comm.hpp shows both deadlocks).
    static void launch_now(Comm& channel) {
        if constexpr (requires { channel.flush(); }) channel.flush();
    }

    // Completes a posted RECV and files the data where the compute that needs it looks.
    void receive(int dir, const sched::action& a, std::map<std::pair<int, int>, matrix>& target, int peer_stage,
                 step_messages& m) {
        const auto it = m.recvs.find({dir, a.stage, a.microbatch});
        if (it == m.recvs.end()) throw error("internal: RECV " + sched::to_string(a) + " was not posted");
        it->second.request.wait();
        target.emplace(std::pair{peer_stage, a.microbatch}, std::move(it->second.buffer));
        m.recvs.erase(it);
    }

    // The current action (nullptr: the sends at the end of the step) in words, for a
    // timeout's message; called by the watchdog's thread while this rank is blocked in a
    // wait, so it reads only what does not change during run().
    static std::string describe_activity(const void* loop, const void* current) {
        return current != nullptr
                   ? static_cast<const program_loop*>(loop)->describe(*static_cast<const sched::action*>(current))
                   : "the end of the step, waiting for its sends to be received";
    }

    // An action in words, for a timeout's message: the user sees what the schedule was
    // doing and, for a receive, from which stage and pipeline rank.
    [[nodiscard]] std::string describe(const sched::action& a) const {
        using sched::action_kind;
        std::string text = "action " + sched::to_string(a) + " on pipeline rank " + std::to_string(pipeline_rank_);
        const std::string mb = "micro-batch " + std::to_string(a.microbatch);
        const auto from = [&](int stage) {
            const bool known = stage >= 0 && stage < program_.num_stages;
            return "stage " + std::to_string(stage) +
                   (known ? " on pipeline rank " + std::to_string(program_.stage_rank[std::size_t(stage)]) : "");
        };
        switch (a.kind) {
            case action_kind::F: return text + " (forward of " + mb + " on stage " + std::to_string(a.stage) + ")";
            case action_kind::B:
            case action_kind::I:
            case action_kind::W:
                return text + " (" +
                       (a.kind == action_kind::B ? "backward" : a.kind == action_kind::I ? "input backward"
                                                                                         : "weight backward") +
                       " of " + mb + " on stage " + std::to_string(a.stage) + ")";
            case action_kind::OVERLAP_F_B: return text + " (overlapped forward and backward)";
            case action_kind::RECV_F:
                return text + " (receive the activations of " + mb + " for stage " + std::to_string(a.stage) +
                       " from " + from(a.stage - 1) + ")";
            case action_kind::RECV_B:
                return text + " (receive the output gradient of " + mb + " for stage " + std::to_string(a.stage) +
                       " from " + from(a.stage + 1) + ")";
            case action_kind::REDUCE_GRAD:
                return text + " (the data-parallel gradient reduction of stage " + std::to_string(a.stage) + ")";
            case action_kind::UNSHARD:
                return text + " (gathering the parameters of stage " + std::to_string(a.stage) + ")";
            default: return text;
        }
    }

    [[nodiscard]] int tag(direction dir, int receiving_stage, int mb) const {
        return (static_cast<int>(dir) * program_.num_stages + receiving_stage) * program_.num_microbatches + mb;
    }

    static matrix take(std::map<std::pair<int, int>, matrix>& from, int stage, int mb, const char* why) {
        const auto it = from.find({stage, mb});
        if (it == from.end())
            throw error(std::string(why) + " (stage " + std::to_string(stage) + ", micro-batch " +
                        std::to_string(mb) + "), but it is not there: the program is out of order");
        matrix value = std::move(it->second);
        from.erase(it);
        return value;
    }

    // A matrix's storage as the bytes the pipeline moves: its own elements, which may be
    // narrower than the weights' scalar (exec::cuda's bf16 activations).
    using element = typename matrix::value_type;
    static std::span<const std::byte> as_bytes(const matrix& m) {
        return std::as_bytes(std::span<const element>(m.data(), static_cast<std::size_t>(m.size())));
    }
    static std::span<std::byte> as_writable_bytes(matrix& m) {
        return std::as_writable_bytes(std::span<element>(m.data(), static_cast<std::size_t>(m.size())));
    }

    sched::program program_;
    int pipeline_rank_;
    model_config model_;
    int rows_per_microbatch_;
    int recv_lookahead_;
    sched::message_channels routes_;
    bool forward_only_ = true;  // no backward action anywhere in the program
    std::map<int, std::size_t> last_weight_action_;  // stage -> index of its last B or W in this rank's row
};

}  // namespace weft::train
