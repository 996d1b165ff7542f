// A communicator whose ranks are threads of one process, for tests, examples and
// single-node runs without MPI. local::run starts the ranks; a failure, a deadlock or a
// wait past the communicator's timeout on any rank ends the whole run with an error
// instead of a hang.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/comm/blocking_collectives.hpp"
#include "weft/comm/communicator.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

namespace detail {

// Messages from nested weft::errors are quoted inside new ones; one "weft: " is enough.
inline std::string without_weft_prefix(std::string message) {
    constexpr std::string_view prefix = "weft: ";
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    return message;
}

// A receive posted before its message arrived. Matching happens when the receive is
// posted (not when it is waited for), as in MPI, so requests may be waited in any order.
struct local_posted_recv {
    std::span<std::byte> buffer;
    int source = 0;
    int tag = 0;
    bool done = false;
    std::string error;
};

// One (destination, source, tag) stream. Both queues are FIFO, which is what makes
// messages non-overtaking; at most one of them is non-empty at any time.
struct local_channel {
    std::deque<std::vector<std::byte>> messages;
    std::deque<std::shared_ptr<local_posted_recv>> receivers;
};

using local_channel_key = std::tuple<int, int, int>;  // (destination, source, tag)

enum class local_op {
    allreduce_float,
    allreduce_double,
    allgather_float,
    allgather_double,
    reduce_scatter_float,
    reduce_scatter_double,
    broadcast,
    barrier,
    split
};

inline std::string local_op_name(local_op op) {
    switch (op) {
        case local_op::allreduce_float: return "allreduce_sum(float)";
        case local_op::allreduce_double: return "allreduce_sum(double)";
        case local_op::allgather_float: return "allgather(float)";
        case local_op::allgather_double: return "allgather(double)";
        case local_op::reduce_scatter_float: return "reduce_scatter_sum(float)";
        case local_op::reduce_scatter_double: return "reduce_scatter_sum(double)";
        case local_op::broadcast: return "broadcast";
        case local_op::barrier: return "barrier";
        case local_op::split: return "split";
    }
    return "?";
}

// One rank's part in a collective. The rank that completes the round reads the other
// ranks' buffers while they wait for it, so contributions are not copied first.
struct local_part {
    local_op op = local_op::barrier;
    std::size_t count = 0;  // elements (per rank's block for allgather/reduce_scatter); bytes for broadcast
    int root = 0;
    int color = 0;
    int key = 0;
    const void* data = nullptr;
};

struct local_group;

struct local_round {
    explicit local_round(std::size_t size) : parts(size), joined(size, false), groups(size), ranks(size) {}
    std::vector<local_part> parts;
    std::vector<bool> joined;  // which group ranks have arrived: a timeout names the others
    std::size_t arrived = 0;
    bool done = false;
    std::string error;
    std::vector<std::byte> result;
    std::vector<std::shared_ptr<local_group>> groups;  // split: the new group of each rank
    std::vector<int> ranks;                            // split: the new rank of each rank
};

struct local_group {
    std::vector<int> world_ranks;  // group rank -> rank in local::run
    std::map<local_channel_key, local_channel> channels;
    // Collectives in progress by sequence number: every rank's k-th collective on the group
    // joins round k, so a rank may start a non-blocking one and go on to the next.
    std::map<std::uint64_t, std::shared_ptr<local_round>> rounds;
};

// State shared by all ranks of one local::run. One mutex guards all of it: the backend
// exists for correctness on one node, and a single lock makes failure propagation and
// deadlock detection exact.
class local_world {
public:
    explicit local_world(int size) : ranks_(static_cast<std::size_t>(size)) {}

    std::mutex mutex;

    // Call with the lock held after any change that may let a blocked rank go on.
    void changed() {
        ++epoch_;
        cv_.notify_all();
    }

    void check_alive() const {
        if (failed_) throw error(failure_);
    }

    // Blocks `world_rank` until done() holds. Throws when some rank failed, or when every
    // rank is blocked or has returned, which is a deadlock: nothing could ever wake them.
    // A blocked rank counts as stuck only once it has seen the latest change, so a rank
    // that was just unblocked but has not run yet never causes a false alarm. Past
    // `timeout` (a peer stuck in compute is no deadlock) it throws timeout_error naming
    // awaited() (the world ranks it waits on), and the whole run fails with it, as under
    // MPI the job is aborted: the ranks waiting on this one must not wait in turn.
    template <class Done, class Awaited>
    void block_until(std::unique_lock<std::mutex>& lock, int world_rank, Done done, const std::string& doing,
                     timeout_duration timeout, Awaited awaited) {
        auto& self = ranks_[static_cast<std::size_t>(world_rank)];
        const auto start = timeout_clock::now();
        const auto deadline = deadline_after(timeout);
        while (!done()) {
            check_alive();
            const auto now = timeout_clock::now();
            if (now >= deadline) {
                timeout_error e({.rank = world_rank, .operation = doing, .peers = awaited(),
                                 .waited_seconds = std::chrono::duration<double>(now - start).count(),
                                 .timeout_seconds = timeout_seconds(timeout), .action = {}});
                fail("rank " + std::to_string(world_rank) + " failed: " + without_weft_prefix(e.what()));
                timed_out_rank_ = world_rank;
                throw e;
            }
            self.waiting = true;
            self.seen_epoch = epoch_;
            self.doing = doing;
            if (everyone_stuck()) {
                fail(deadlock_report());
                self.waiting = false;
                check_alive();
            }
            if (deadline == timeout_clock::time_point::max()) {
                cv_.wait(lock);
            } else {
                cv_.wait_until(lock, deadline);
            }
            self.waiting = false;
        }
    }

    // Records the first failure; later ones are consequences of it. Lock held.
    void fail(std::string message) {
        if (!failed_) {
            failed_ = true;
            failure_ = std::move(message);
        }
        changed();
    }

    // A rank whose timeout failed the run has the last word on it: what it finally threw
    // says more (the program loop adds the schedule action it was in).
    void fail_rank(int world_rank, const std::string& what) {
        std::lock_guard lock(mutex);
        std::string message = "rank " + std::to_string(world_rank) + " failed: " + without_weft_prefix(what);
        if (failed_ && timed_out_rank_ == world_rank) {
            failure_ = std::move(message);
            timed_out_rank_ = -1;
            return;
        }
        fail(std::move(message));
    }

    void finish(int world_rank) {
        std::lock_guard lock(mutex);
        ranks_[static_cast<std::size_t>(world_rank)].returned = true;
        changed();
    }

    void rethrow_failure() {
        std::lock_guard lock(mutex);
        check_alive();
    }

private:
    struct rank_state {
        bool waiting = false;
        bool returned = false;
        std::uint64_t seen_epoch = 0;
        std::string doing;
    };

    bool everyone_stuck() const {
        return std::all_of(ranks_.begin(), ranks_.end(), [&](const rank_state& r) {
            return r.returned || (r.waiting && r.seen_epoch == epoch_);
        });
    }

    std::string deadlock_report() const {
        std::string report = "deadlock in local::run: every rank is blocked or has returned (";
        for (std::size_t r = 0; r < ranks_.size(); ++r) {
            if (r != 0) report += "; ";
            report += "rank " + std::to_string(r) +
                      (ranks_[r].returned ? " has returned" : " waits in " + ranks_[r].doing);
        }
        return report + ")";
    }

    std::condition_variable cv_;
    std::vector<rank_state> ranks_;
    std::uint64_t epoch_ = 0;
    bool failed_ = false;
    std::string failure_;
    int timed_out_rank_ = -1;  // the rank whose timeout is the failure, until it reports
};

inline void local_deliver(local_posted_recv& recv, const std::vector<std::byte>& message) {
    if (message.size() == recv.buffer.size()) {
        if (!message.empty()) std::memcpy(recv.buffer.data(), message.data(), message.size());
    } else {
        recv.error = "irecv(source=" + std::to_string(recv.source) +
                     ", tag=" + std::to_string(recv.tag) + ") has a buffer of " +
                     std::to_string(recv.buffer.size()) + " bytes but the message has " +
                     std::to_string(message.size()) +
                     " bytes; the receive buffer must be exactly the message size";
    }
    recv.done = true;
}

template <class T>
void local_sum_in_rank_order(local_round& round, std::size_t count) {
    // Rank order 0..n-1 on every element keeps results bit-reproducible.
    std::vector<T> sum(count);
    for (std::size_t r = 0; r < round.parts.size(); ++r) {
        const T* in = static_cast<const T*>(round.parts[r].data);
        if (r == 0) {
            std::copy(in, in + count, sum.begin());
        } else {
            for (std::size_t i = 0; i < count; ++i) sum[i] += in[i];
        }
    }
    round.result.resize(count * sizeof(T));
    if (count != 0) std::memcpy(round.result.data(), sum.data(), round.result.size());
}

// allgather: rank r's block lands at block r, in rank order.
template <class T>
void local_gather_in_rank_order(local_round& round, std::size_t count) {
    round.result.resize(round.parts.size() * count * sizeof(T));
    for (std::size_t r = 0; r < round.parts.size(); ++r)
        if (count != 0) std::memcpy(round.result.data() + r * count * sizeof(T), round.parts[r].data, count * sizeof(T));
}

inline bool local_is_elementwise(local_op op) {
    return op != local_op::broadcast && op != local_op::barrier && op != local_op::split;
}

inline std::string local_part_text(const local_part& p, std::size_t rank) {
    std::string text = "rank " + std::to_string(rank) + " called " + local_op_name(p.op);
    if (local_is_elementwise(p.op)) {
        text += " with " + std::to_string(p.count) + " elements";
    } else if (p.op == local_op::broadcast) {
        text += " with " + std::to_string(p.count) + " bytes from root " + std::to_string(p.root);
    }
    return text;
}

inline void local_complete(local_round& round, const local_group& group) {
    const local_part& first = round.parts[0];
    for (std::size_t r = 1; r < round.parts.size(); ++r) {
        const local_part& p = round.parts[r];
        bool same = p.op == first.op && p.count == first.count &&
                    (p.op != local_op::broadcast || p.root == first.root);
        if (!same) {
            round.error = "collective mismatch: " + local_part_text(first, 0) + " but " +
                          local_part_text(p, r) +
                          "; every rank of a group must make the same collective call with the "
                          "same length";
            return;
        }
    }
    switch (first.op) {
        case local_op::allreduce_float: local_sum_in_rank_order<float>(round, first.count); break;
        case local_op::allreduce_double: local_sum_in_rank_order<double>(round, first.count); break;
        case local_op::allgather_float: local_gather_in_rank_order<float>(round, first.count); break;
        case local_op::allgather_double: local_gather_in_rank_order<double>(round, first.count); break;
        // Each rank reads its block of the full sum; summing every block keeps the code one path.
        case local_op::reduce_scatter_float:
            local_sum_in_rank_order<float>(round, first.count * round.parts.size());
            break;
        case local_op::reduce_scatter_double:
            local_sum_in_rank_order<double>(round, first.count * round.parts.size());
            break;
        case local_op::broadcast: {
            const auto* in = static_cast<const std::byte*>(round.parts[static_cast<std::size_t>(first.root)].data);
            round.result.assign(in, in + first.count);
            break;
        }
        case local_op::barrier: break;
        case local_op::split: {
            // Like MPI_Comm_split: one group per color, ordered by (key, old rank).
            std::map<int, std::vector<std::size_t>> members;
            for (std::size_t r = 0; r < round.parts.size(); ++r) members[round.parts[r].color].push_back(r);
            for (auto& [color, ranks] : members) {
                std::stable_sort(ranks.begin(), ranks.end(), [&](std::size_t a, std::size_t b) {
                    return round.parts[a].key < round.parts[b].key;
                });
                auto sub = std::make_shared<local_group>();
                for (std::size_t i = 0; i < ranks.size(); ++i) {
                    sub->world_ranks.push_back(group.world_ranks[ranks[i]]);
                    round.groups[ranks[i]] = sub;
                    round.ranks[ranks[i]] = static_cast<int>(i);
                }
            }
            break;
        }
    }
}

}  // namespace detail

class local : public blocking_collectives<local> {
public:
    // What it moves: threads of one process exchange host memory.
    using memory_space = weft::host_space;

    // The handle of a non-blocking operation. Sends are buffered and complete at once;
    // a receive or a non-blocking collective completes in wait(). Destroying a request
    // that was not waited for cancels its receive (the buffer is never written
    // afterwards), or waits for its collective, whose buffers other ranks may still read.
    class request {
    public:
        request() = default;
        request(request&&) noexcept = default;
        request& operator=(request&& other) noexcept {
            if (this != &other) {
                cancel();
                world_ = std::move(other.world_);
                group_ = std::move(other.group_);
                recv_ = std::move(other.recv_);
                round_ = std::move(other.round_);
                result_ = other.result_;
                result_from_ = other.result_from_;
                doing_ = std::move(other.doing_);
                key_ = other.key_;
                world_rank_ = other.world_rank_;
                timeout_ = other.timeout_;
            }
            return *this;
        }
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        ~request() { cancel(); }

        // Waiting again, or on a moved-from request, does nothing.
        void wait() {
            if (round_) {
                finish_collective();
                return;
            }
            if (!recv_) return;
            std::unique_lock lock(world_->mutex);
            try {
                const auto& [dest, source, tag] = key_;
                world_->block_until(
                    lock, world_rank_, [&] { return recv_->done; },
                    "irecv(source=" + std::to_string(source) + ", tag=" + std::to_string(tag) + ") of " +
                        std::to_string(recv_->buffer.size()) + " bytes",
                    timeout_, [&] { return std::vector<int>{group_->world_ranks[static_cast<std::size_t>(source)]}; });
                (void)dest;
            } catch (...) {
                cancel_locked();
                throw;
            }
            auto recv = std::move(recv_);
            if (!recv->error.empty()) throw error(recv->error);
        }

    private:
        friend class local;

        // Blocks until every rank joined the round, then copies this rank's share of the
        // result. The result is read after the lock is released: nothing writes a
        // completed round again.
        void finish_collective() {
            auto round = std::move(round_);
            {
                std::unique_lock lock(world_->mutex);
                world_->block_until(lock, world_rank_, [&] { return round->done; }, doing_, timeout_, [&] {
                    std::vector<int> missing;
                    for (std::size_t r = 0; r < round->joined.size(); ++r)
                        if (!round->joined[r]) missing.push_back(group_->world_ranks[r]);
                    return missing;
                });
            }
            if (!round->error.empty()) throw error(round->error);
            if (!result_.empty()) std::memcpy(result_.data(), round->result.data() + result_from_, result_.size());
        }

        void cancel() noexcept {
            if (round_) {
                try {
                    finish_collective();
                } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; the run reports the failure
                }
                return;
            }
            if (!recv_) return;
            std::lock_guard lock(world_->mutex);
            cancel_locked();
        }

        void cancel_locked() noexcept {
            if (!recv_->done) {
                auto it = group_->channels.find(key_);
                if (it != group_->channels.end()) {
                    auto& receivers = it->second.receivers;
                    receivers.erase(std::remove(receivers.begin(), receivers.end(), recv_),
                                    receivers.end());
                    if (receivers.empty() && it->second.messages.empty()) group_->channels.erase(it);
                }
            }
            recv_.reset();
        }

        std::shared_ptr<detail::local_world> world_;
        std::shared_ptr<detail::local_group> group_;
        std::shared_ptr<detail::local_posted_recv> recv_;
        // A non-blocking collective: its round, where this rank's share of the result goes
        // and where in the round's result that share starts.
        std::shared_ptr<detail::local_round> round_;
        std::span<std::byte> result_;
        std::size_t result_from_ = 0;
        std::string doing_;
        detail::local_channel_key key_{};
        int world_rank_ = 0;
        timeout_duration timeout_ = default_timeout;
    };

    local(local&&) noexcept = default;
    local& operator=(local&&) noexcept = default;
    local(const local&) = delete;
    local& operator=(const local&) = delete;
    ~local() = default;

    [[nodiscard]] int rank() const { return rank_; }
    [[nodiscard]] int size() const { return static_cast<int>(group().world_ranks.size()); }

    // How long a wait on a peer (a receive, a collective) may take before it throws
    // timeout_error and fails the run; > 0, no_timeout (or anything from 100 years) waits
    // forever. A deadlock (every rank waits) is reported at once whatever the timeout; the
    // timeout catches a peer that computes, or is stuck, for too long. Communicators made by
    // split() start with this one's; requests keep the timeout they were started with.
    template <class Rep, class Period>
    void set_timeout(std::chrono::duration<Rep, Period> timeout) {
        timeout_ = checked_timeout(timeout);
    }
    [[nodiscard]] timeout_duration timeout() const { return timeout_; }

    // Copies `data`, so the caller may reuse it as soon as isend returns.
    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        detail::check_peer("dest", dest, size());
        detail::check_tag(tag);
        std::vector<std::byte> message(data.begin(), data.end());
        std::lock_guard lock(world_->mutex);
        detail::local_channel_key key{dest, rank_, tag};
        auto& channel = group_->channels[key];
        if (channel.receivers.empty()) {
            channel.messages.push_back(std::move(message));
        } else {
            auto recv = std::move(channel.receivers.front());
            channel.receivers.pop_front();
            detail::local_deliver(*recv, message);
            if (channel.receivers.empty()) group_->channels.erase(key);
        }
        world_->changed();
        return request{};
    }

    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        detail::check_peer("source", source, size());
        detail::check_tag(tag);
        auto recv = std::make_shared<detail::local_posted_recv>();
        recv->buffer = buffer;
        recv->source = source;
        recv->tag = tag;
        detail::local_channel_key key{rank_, source, tag};
        std::lock_guard lock(world_->mutex);
        auto& channel = group_->channels[key];
        if (channel.messages.empty()) {
            channel.receivers.push_back(recv);
        } else {
            detail::local_deliver(*recv, channel.messages.front());
            channel.messages.pop_front();
            if (channel.messages.empty()) group_->channels.erase(key);
        }
        request r;
        r.world_ = world_;
        r.group_ = group_;
        r.recv_ = std::move(recv);
        r.key_ = key;
        r.world_rank_ = world_rank_;
        r.timeout_ = timeout_;
        return r;
    }

    // The collectives, blocking (allreduce_sum, allgather, reduce_scatter_sum: start, then
    // wait; blocking_collectives.hpp) or not: the buffers belong to the operation until wait().
    // Every rank starts its collectives, blocking or not, in the same order. An allreduce gives
    // every rank the sum taken in rank order 0..n-1, bit for bit the same; an allgather puts
    // rank r's `mine` at all[r*n, (r+1)*n) (n = mine.size()); a reduce-scatter gives `mine`
    // the rank-order sum of every rank's block rank() of `all`.
    [[nodiscard]] request iallreduce_sum(std::span<float> values) {
        return start_allreduce(values, detail::local_op::allreduce_float);
    }
    [[nodiscard]] request iallreduce_sum(std::span<double> values) {
        return start_allreduce(values, detail::local_op::allreduce_double);
    }
    [[nodiscard]] request iallgather(std::span<const float> mine, std::span<float> all) {
        return start_allgather(mine, all, detail::local_op::allgather_float);
    }
    [[nodiscard]] request iallgather(std::span<const double> mine, std::span<double> all) {
        return start_allgather(mine, all, detail::local_op::allgather_double);
    }
    [[nodiscard]] request ireduce_scatter_sum(std::span<const float> all, std::span<float> mine) {
        return start_reduce_scatter(all, mine, detail::local_op::reduce_scatter_float);
    }
    [[nodiscard]] request ireduce_scatter_sum(std::span<const double> all, std::span<double> mine) {
        return start_reduce_scatter(all, mine, detail::local_op::reduce_scatter_double);
    }

    void broadcast(std::span<std::byte> data, int root) {
        detail::check_peer("root", root, size());
        request r = start({detail::local_op::broadcast, data.size(), root, 0, 0, data.data()},
                          "broadcast(root=" + std::to_string(root) + ")",
                          rank_ == root ? std::span<std::byte>() : data, 0);
        r.wait();
    }

    void barrier() { start({detail::local_op::barrier, 0, 0, 0, 0, nullptr}, "barrier()", {}, 0).wait(); }

    // Like MPI_Comm_split: ranks with the same color form a group, ordered by (key, rank).
    [[nodiscard]] local split(int color, int key) {
        require(color >= 0, "color", color, "must be >= 0 (every rank joins one group)");
        request r = start({detail::local_op::split, 0, 0, color, key, nullptr},
                          "split(color=" + std::to_string(color) + ")", {}, 0);
        const auto round = r.round_;
        r.wait();
        auto me = static_cast<std::size_t>(rank_);
        local sub(world_, round->groups[me], world_rank_, round->ranks[me]);
        sub.timeout_ = timeout_;
        return sub;
    }

    // Runs fn(local&) on world_size threads, one per rank, and joins them. When a rank
    // throws, every rank blocked in this run wakes with a weft::error, and run() throws
    // the first failure ("rank r failed: ..."). A deadlock, or a wait past its timeout, is
    // reported the same way. run() returns once every thread has: a rank stuck in compute
    // for good is reported by the ranks waiting on it, but cannot be ended.
    template <class F>
    static void run(int world_size, F&& fn) {
        require(world_size >= 1, "world_size", world_size, "must be at least 1");
        auto world = std::make_shared<detail::local_world>(world_size);
        auto group = std::make_shared<detail::local_group>();
        for (int r = 0; r < world_size; ++r) group->world_ranks.push_back(r);
        std::vector<std::thread> threads;
        threads.reserve(static_cast<std::size_t>(world_size));
        for (int r = 0; r < world_size; ++r) {
            try {
                threads.emplace_back([&fn, world, group, r] {
                    try {
                        local comm(world, group, r, r);
                        std::invoke(fn, comm);
                    } catch (const std::exception& e) {
                        world->fail_rank(r, e.what());
                    } catch (...) {
                        world->fail_rank(r, "an exception not derived from std::exception");
                    }
                    world->finish(r);
                });
            } catch (const std::system_error& e) {
                world->fail_rank(r, std::string("could not start its thread: ") + e.what());
                for (int q = r; q < world_size; ++q) world->finish(q);
                break;
            }
        }
        for (auto& t : threads) t.join();
        world->rethrow_failure();
    }

private:
    local(std::shared_ptr<detail::local_world> world, std::shared_ptr<detail::local_group> group,
          int world_rank, int rank)
        : world_(std::move(world)), group_(std::move(group)), world_rank_(world_rank), rank_(rank) {}

    const detail::local_group& group() const {
        if (!group_) throw error("use of a moved-from weft::comm::local");
        return *group_;
    }

    template <class T>
    request start_allreduce(std::span<T> values, detail::local_op op) {
        return start({op, values.size(), 0, 0, 0, values.data()},
                     detail::local_op_name(op) + " of " + std::to_string(values.size()) + " elements",
                     std::as_writable_bytes(values), 0);
    }

    template <class T>
    request start_allgather(std::span<const T> mine, std::span<T> all, detail::local_op op) {
        require(all.size() == mine.size() * static_cast<std::size_t>(size()), "allgather: all.size()", all.size(),
                "must be size() * mine.size() = " + std::to_string(static_cast<std::size_t>(size()) * mine.size()));
        return start({op, mine.size(), 0, 0, 0, mine.data()},
                     detail::local_op_name(op) + " of " + std::to_string(mine.size()) + " elements",
                     std::as_writable_bytes(all), 0);
    }

    template <class T>
    request start_reduce_scatter(std::span<const T> all, std::span<T> mine, detail::local_op op) {
        require(all.size() == mine.size() * static_cast<std::size_t>(size()), "reduce_scatter_sum: all.size()",
                all.size(),
                "must be size() * mine.size() = " + std::to_string(static_cast<std::size_t>(size()) * mine.size()));
        return start({op, mine.size(), 0, 0, 0, all.data()},
                     detail::local_op_name(op) + " of " + std::to_string(mine.size()) + " elements",
                     std::as_writable_bytes(mine), static_cast<std::size_t>(rank_) * mine.size_bytes());
    }

    // Joins this rank's next round of the group (every rank's k-th collective meets in
    // round k), completing it when this rank is the last to arrive, and returns a request
    // that copies result[result_from, result_from + result.size()) into `result` on wait().
    request start(detail::local_part part, std::string doing, std::span<std::byte> result, std::size_t result_from) {
        const auto n = static_cast<std::size_t>(size());
        request r;
        {
            std::lock_guard lock(world_->mutex);
            // After a failure no round may complete: waiting ranks have left, their buffers with them.
            world_->check_alive();
            auto& slot = group_->rounds[next_round_];
            if (!slot) slot = std::make_shared<detail::local_round>(n);
            r.round_ = slot;
            r.round_->parts[static_cast<std::size_t>(rank_)] = part;
            r.round_->joined[static_cast<std::size_t>(rank_)] = true;
            if (++r.round_->arrived == n) {
                detail::local_complete(*r.round_, *group_);
                r.round_->done = true;
                group_->rounds.erase(next_round_);
                world_->changed();
            }
            ++next_round_;
        }
        r.world_ = world_;
        r.group_ = group_;
        r.result_ = result;
        r.result_from_ = result_from;
        r.doing_ = std::move(doing);
        r.world_rank_ = world_rank_;
        r.timeout_ = timeout_;
        return r;
    }

    std::shared_ptr<detail::local_world> world_;
    std::shared_ptr<detail::local_group> group_;
    int world_rank_ = 0;
    int rank_ = 0;
    timeout_duration timeout_ = default_timeout;
    std::uint64_t next_round_ = 0;  // sequence number of this rank's next collective on the group
};

static_assert(communicator<local>);

}  // namespace weft::comm
