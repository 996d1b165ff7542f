// rendezvous<Inner>: comm::nccl's rules for sends and receives, on threads, so that CPU
// tests can show whether the engine's pipeline would hang the GPUs' streams. Beyond
// posting-order matching (posting_order_comm.hpp) NCCL differs from comm::local in three
// ways that can deadlock, and comm::local keeps none of them (its sends are buffered and
// start at once):
//
// * Batches. comm::nccl does not start a posted send or receive. It keeps it pending and
//   launches every pending one as one NCCL group when a request of theirs is waited for,
//   or on flush(), a collective or a split.
// * One stream per communicator. A communicator's groups run one after another: a group
//   starts when the one launched before it on the same communicator has ended.
// * Rendezvous. An NCCL send waits for the matching receive to be running on the peer (a
//   message larger than NCCL's buffers cannot go ahead of it), and a group ends when all
//   of its sends and receives have. Inside a group they progress together.
//
// Here each communicator has a thread that runs its launched groups in order, as its
// stream would; messages go through a post office shared by the rank threads. wait() blocks
// the rank thread until the group has ended. On a GPU the host would go on and only the
// compute stream would wait, but exec::cuda synchronizes the host with the compute stream
// inside several kernels (the loss, host copies), so a program that deadlocks here can
// deadlock there. A group that cannot end within `patience` is reported as a deadlock
// (weft::error), which local::run passes on from every rank.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/core/error.hpp"

namespace weft_test {

namespace rendezvous_model {

// The messages of one communicator from one rank to another, in order, and how many
// receives the receiver has started for them.
struct mailbox {
    std::deque<std::vector<std::byte>> messages;
    long long receives_started = 0;
    long long sends_done = 0;
};

// Shared by every rank thread and stream thread of a process.
struct post_office {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::tuple<long long, int, int>, mailbox> boxes;  // (communicator, from, to)
    long long next_communicator = 0;
};
inline post_office& office() {
    static post_office o;
    return o;
}

}  // namespace rendezvous_model

template <weft::communicator Inner>
class rendezvous {
    // A posted send or receive, and whether its group has ended.
    struct posted {
        bool is_send = false;
        std::span<std::byte> data;  // a send's is only read
        int peer = 0;
        bool done = false;
    };
    using group = std::vector<std::shared_ptr<posted>>;

    // One communicator: its pending operations, and its stream (a thread running the launched
    // groups in order).
    struct state {
        state(Inner i, long long id, std::chrono::milliseconds p, std::shared_ptr<long long> g)
            : inner(std::move(i)), communicator(id), patience(p), groups(std::move(g)), stream([this] { run(); }) {}
        state(const state&) = delete;
        state& operator=(const state&) = delete;
        ~state() {
            {
                const std::scoped_lock lock(mutex);
                stopping = true;
            }
            changed.notify_all();
            stream.join();
        }

        // Hands the pending operations to the stream as one group.
        void launch() {
            if (pending.empty()) return;
            {
                const std::scoped_lock lock(mutex);
                launched.push_back(std::move(pending));
                ++*groups;
            }
            pending.clear();
            changed.notify_all();
        }
        // Until `op`'s group has ended (or the stream failed, which is rethrown).
        void wait_for(const posted& op) {
            std::unique_lock lock(mutex);
            changed.wait(lock, [&] { return op.done || failure; });
            if (!op.done) std::rethrow_exception(failure);
        }
        // Until every launched group has ended: what a collective on the same stream waits for.
        void drain() {
            launch();
            std::unique_lock lock(mutex);
            changed.wait(lock, [&] { return (launched.empty() && !running) || failure; });
            if (failure) std::rethrow_exception(failure);
        }

        Inner inner;
        const long long communicator;
        const std::chrono::milliseconds patience;
        std::shared_ptr<long long> groups;  // launched here and by the communicators split from it
        group pending;                      // the rank thread's, not yet launched

    private:
        void run() {
            for (;;) {
                group g;
                {
                    std::unique_lock lock(mutex);
                    changed.wait(lock, [&] { return stopping || !launched.empty(); });
                    if (launched.empty()) return;
                    g = std::move(launched.front());
                    launched.pop_front();
                    running = true;
                }
                try {
                    execute(g);
                } catch (...) {
                    const std::scoped_lock lock(mutex);
                    failure = std::current_exception();
                    launched.clear();
                }
                {
                    const std::scoped_lock lock(mutex);
                    running = false;
                    if (!failure)
                        for (auto& op : g) op->done = true;
                }
                changed.notify_all();
            }
        }

        // The group's receives start; then every operation goes ahead as soon as it can,
        // each after the one before it with the same peer and kind.
        void execute(const group& g) {
            auto& o = rendezvous_model::office();
            std::unique_lock lock(o.mutex);
            const int me = inner.rank();
            for (const auto& op : g)
                if (!op->is_send) ++o.boxes[{communicator, op->peer, me}].receives_started;
            o.changed.notify_all();
            std::vector<bool> finished(g.size(), false);
            const auto deadline = std::chrono::steady_clock::now() + patience;
            for (std::size_t left = g.size(); left > 0;) {
                bool progressed = false;
                for (std::size_t i = 0; i < g.size(); ++i) {
                    if (finished[i] || !first_unfinished(g, finished, i)) continue;
                    const posted& op = *g[i];
                    if (op.is_send) {
                        auto& box = o.boxes[{communicator, me, op.peer}];
                        if (box.receives_started <= box.sends_done) continue;  // rendezvous
                        box.messages.emplace_back(op.data.begin(), op.data.end());
                        ++box.sends_done;
                    } else {
                        auto& box = o.boxes[{communicator, op.peer, me}];
                        if (box.messages.empty()) continue;
                        const auto message = std::move(box.messages.front());
                        box.messages.pop_front();
                        if (message.size() != op.data.size())
                            throw weft::error("rendezvous: a receive of " + std::to_string(op.data.size()) +
                                              " bytes from rank " + std::to_string(op.peer) + " got a message of " +
                                              std::to_string(message.size()) + " bytes");
                        if (!message.empty()) std::memcpy(op.data.data(), message.data(), message.size());
                    }
                    finished[i] = true;
                    --left;
                    progressed = true;
                }
                if (progressed) {
                    o.changed.notify_all();
                    continue;
                }
                if (o.changed.wait_until(lock, deadline) == std::cv_status::timeout)
                    throw weft::error("deadlock: rank " + std::to_string(me) + "'s group of " +
                                      std::to_string(g.size()) + " sends and receives " + describe(g, finished) +
                                      " could not end in " + std::to_string(patience.count()) +
                                      " ms: its peers' streams wait for it, or it for them, as NCCL's would");
            }
        }

        // Whether no earlier unfinished operation of `g` has the same peer and kind as g[i].
        static bool first_unfinished(const group& g, const std::vector<bool>& finished, std::size_t i) {
            for (std::size_t j = 0; j < i; ++j)
                if (!finished[j] && g[j]->is_send == g[i]->is_send && g[j]->peer == g[i]->peer) return false;
            return true;
        }
        static std::string describe(const group& g, const std::vector<bool>& finished) {
            std::string out = "(waiting:";
            for (std::size_t i = 0; i < g.size(); ++i)
                if (!finished[i])
                    out += std::string(g[i]->is_send ? " send to " : " receive from ") + std::to_string(g[i]->peer);
            return out + ")";
        }

        std::mutex mutex;
        std::condition_variable changed;
        std::deque<group> launched;
        bool running = false;
        bool stopping = false;
        std::exception_ptr failure;
        std::thread stream;  // last: it starts running once everything above exists
    };

public:
    using memory_space = typename Inner::memory_space;
    static constexpr weft::comm::message_matching matching = weft::comm::message_matching::in_posting_order;

    class request {
    public:
        request() = default;
        request(request&&) noexcept = default;
        request& operator=(request&&) noexcept = default;
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        ~request() = default;

        // A send or receive: launches the batch it is pending in, and waits for its group.
        // A collective: waits for it.
        void wait() {
            if (op_) {
                if (std::find(state_->pending.begin(), state_->pending.end(), op_) != state_->pending.end())
                    state_->launch();
                state_->wait_for(*op_);
                op_.reset();
            }
            if (collective_) {
                collective_->wait();
                collective_.reset();
            }
        }

    private:
        friend class rendezvous;
        request(std::shared_ptr<state> s, std::shared_ptr<posted> op) : state_(std::move(s)), op_(std::move(op)) {}
        explicit request(typename Inner::request collective) : collective_(std::move(collective)) {}
        std::shared_ptr<state> state_;
        std::shared_ptr<posted> op_;
        std::optional<typename Inner::request> collective_;
    };

    // Collective over `inner` (the ranks agree on the communicator's mailboxes).
    explicit rendezvous(Inner inner, std::chrono::milliseconds patience = std::chrono::seconds(20))
        : rendezvous(std::move(inner), patience, std::make_shared<long long>(0)) {}

    [[nodiscard]] int rank() const { return state_->inner.rank(); }
    [[nodiscard]] int size() const { return state_->inner.size(); }
    // Groups launched by this communicator and every one split from it.
    [[nodiscard]] long long groups_launched() const { return *state_->groups; }

    // Posted, not started (the tag is checked as every communicator checks it, then dropped).
    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        return post(true, {const_cast<std::byte*>(data.data()), data.size()}, dest, tag);
    }
    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        return post(false, buffer, source, tag);
    }
    // Launches what is pending, as comm::nccl::flush() does.
    void flush() { state_->launch(); }

    // Collectives follow the stream's groups.
    template <class T>
    void allreduce_sum(std::span<T> values) {
        state_->drain();
        state_->inner.allreduce_sum(values);
    }
    template <class T>
    void allgather(std::span<const T> mine, std::span<T> all) {
        state_->drain();
        state_->inner.allgather(mine, all);
    }
    template <class T>
    void reduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        state_->drain();
        state_->inner.reduce_scatter_sum(all, mine);
    }
    void broadcast(std::span<std::byte> bytes, int root) {
        state_->drain();
        state_->inner.broadcast(bytes, root);
    }
    void barrier() {
        state_->drain();
        state_->inner.barrier();
    }
    // Started, and not waited for: the host goes on, as while NCCL's collective runs on
    // the communicator's stream.
    template <class T>
    [[nodiscard]] request iallreduce_sum(std::span<T> values) {
        state_->drain();
        return request(state_->inner.iallreduce_sum(values));
    }
    template <class T>
    [[nodiscard]] request iallgather(std::span<const T> mine, std::span<T> all) {
        state_->drain();
        return request(state_->inner.iallgather(mine, all));
    }
    template <class T>
    [[nodiscard]] request ireduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        state_->drain();
        return request(state_->inner.ireduce_scatter_sum(all, mine));
    }

    [[nodiscard]] rendezvous split(int color, int key) {
        state_->drain();
        return rendezvous(state_->inner.split(color, key), state_->patience, state_->groups);
    }

private:
    rendezvous(Inner inner, std::chrono::milliseconds patience, std::shared_ptr<long long> groups) {
        // Rank 0 numbers the communicator; every rank learns the number.
        long long id[1] = {0};
        if (inner.rank() == 0) {
            auto& o = rendezvous_model::office();
            const std::scoped_lock lock(o.mutex);
            id[0] = o.next_communicator++;
        }
        inner.broadcast(std::as_writable_bytes(std::span<long long>(id)), 0);
        state_ = std::make_shared<state>(std::move(inner), id[0], patience, std::move(groups));
    }

    request post(bool is_send, std::span<std::byte> data, int peer, int tag) {
        weft::comm::detail::check_tag(tag);
        weft::comm::detail::check_peer(is_send ? "dest" : "source", peer, size());
        auto op = std::make_shared<posted>(posted{is_send, data, peer, false});
        state_->pending.push_back(op);
        return request(state_, std::move(op));
    }

    std::shared_ptr<state> state_;
};

}  // namespace weft_test
