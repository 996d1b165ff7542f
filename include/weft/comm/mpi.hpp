// The communicator over an MPI communicator, for mpirun-launched programs. Every MPI
// call's return code is checked (MPI_ERRORS_RETURN is set on the communicator) and
// turned into a weft::error that names the call and MPI's own message. Every wait on a
// peer is polled against the communicator's timeout (weft/comm/timeout.hpp), so a
// stopped or dead peer is a timeout_error, never a silent hang.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

namespace detail {

inline void mpi_check(int code, std::string_view call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
    throw error(std::string(call) + " failed: " +
                (length > 0 ? std::string(text, static_cast<std::size_t>(length))
                            : "error code " + std::to_string(code)));
}

inline bool mpi_usable() {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized != 0 && finalized == 0;
}

// MPI counts are int; larger buffers would be silently cut.
inline int mpi_count(std::size_t count, std::string_view parameter) {
    require(count <= static_cast<std::size_t>(INT_MAX), parameter, count,
            "must have at most INT_MAX (" + std::to_string(INT_MAX) + ") elements for MPI");
    return static_cast<int>(count);
}

// Who is in a communicator, in MPI_COMM_WORLD's numbering: a timeout names peers by their
// world rank, the number mpirun and the user see. Computed once per communicator.
struct mpi_group {
    int world_rank = 0;
    std::vector<int> world_ranks;  // of group ranks 0..size-1

    [[nodiscard]] int world_of(int rank) const {
        return rank >= 0 && static_cast<std::size_t>(rank) < world_ranks.size()
                   ? world_ranks[static_cast<std::size_t>(rank)]
                   : rank;
    }

    [[nodiscard]] std::string members() const {
        std::string text = "over " + std::to_string(world_ranks.size()) + " ranks (world ranks ";
        const std::size_t shown = std::min<std::size_t>(world_ranks.size(), 16);
        for (std::size_t i = 0; i < shown; ++i) text += (i != 0 ? ", " : "") + std::to_string(world_ranks[i]);
        return text + (shown < world_ranks.size() ? ", ...)" : ")");
    }
};

inline std::shared_ptr<const mpi_group> mpi_group_of(MPI_Comm comm, int rank, int size) {
    auto group = std::make_shared<mpi_group>();
    std::vector<int> ranks(static_cast<std::size_t>(size));
    std::iota(ranks.begin(), ranks.end(), 0);
    group->world_ranks = ranks;
    MPI_Group mine = MPI_GROUP_NULL;
    MPI_Group world = MPI_GROUP_NULL;
    if (MPI_Comm_group(comm, &mine) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
        // Only messages depend on it: on failure the group's own numbers stand in.
        if (MPI_Group_translate_ranks(mine, size, ranks.data(), world, group->world_ranks.data()) != MPI_SUCCESS)
            group->world_ranks = ranks;
    }
    if (mine != MPI_GROUP_NULL) MPI_Group_free(&mine);
    if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
    group->world_rank = group->world_of(rank);
    return group;
}

// Polls `request` until it completes (or fails: `code` says which) and returns true, or
// returns false with the request still pending once `deadline` has passed. MPI_Wait cannot
// give up, hence MPI_Test, which runs MPI's progress engine once per call as MPI_Wait's loop
// does. No yield of our own: Open MPI's progress already yields when the node is
// oversubscribed, and one more sched_yield per poll made large transfers 2-5x slower on a
// busy machine (bench_comm).
inline bool mpi_test_until(MPI_Request& request, MPI_Status& status, timeout_clock::time_point deadline,
                           int& code) {
    for (;;) {
        int done = 0;
        code = MPI_Test(&request, &done, &status);
        if (code != MPI_SUCCESS || done != 0) return true;
        if (timeout_clock::now() >= deadline) return false;
    }
}

// Set on a thread that threw a timeout_error: while that exception unwinds, requests dropped
// unwaited are abandoned at once, not waited for, since they most likely wait on the same
// stopped peer (one timeout each would add up). Cleared by the next wait.
inline thread_local bool mpi_timeout_unwinding = false;

}  // namespace detail

class mpi {
public:
    // What it moves: buffers are host memory (weft does not assume a CUDA-aware MPI).
    using memory_space = weft::host_space;

    // A non-blocking MPI operation. Destroying a request that was not waited for:
    // a receive is cancelled (MPI_Cancel, then waited for), so its buffer is never written
    // afterwards; a send or a collective is waited for, because MPI has no safe way to
    // abandon one whose buffer is about to go away (MPI_Request_free would leave it
    // reading freed memory). That wait ends at the communicator's timeout (at once while a
    // timeout_error unwinds), and the request is then left to MPI: a job that timed out is
    // to be ended. Errors in the destructor are swallowed, and nothing is done once MPI is
    // finalised.
    class request {
    public:
        request() = default;
        request(request&& other) noexcept
            : handle_(std::exchange(other.handle_, MPI_REQUEST_NULL)),
              kind_(other.kind_),
              call_(other.call_),
              what_(other.what_),
              bytes_(other.bytes_),
              count_(other.count_),
              peer_(other.peer_),
              tag_(other.tag_),
              timeout_(other.timeout_),
              group_(std::move(other.group_)),
              scratch_(std::move(other.scratch_)) {}
        request& operator=(request&& other) noexcept {
            if (this != &other) {
                abandon();
                handle_ = std::exchange(other.handle_, MPI_REQUEST_NULL);
                kind_ = other.kind_;
                call_ = other.call_;
                what_ = other.what_;
                bytes_ = other.bytes_;
                count_ = other.count_;
                peer_ = other.peer_;
                tag_ = other.tag_;
                timeout_ = other.timeout_;
                group_ = std::move(other.group_);
                scratch_ = std::move(other.scratch_);
            }
            return *this;
        }
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        ~request() { abandon(); }

        // Waiting again, or on a moved-from request, does nothing. Throws timeout_error when
        // the operation has not completed within the communicator's timeout.
        void wait() {
            if (handle_ == MPI_REQUEST_NULL) return;
            detail::mpi_timeout_unwinding = false;
            MPI_Status status{};
            int code = MPI_SUCCESS;
            const auto start = timeout_clock::now();
            if (!detail::mpi_test_until(handle_, status, deadline_after(timeout_), code)) give_up(start);
            handle_ = MPI_REQUEST_NULL;
            if (kind_ != kind::recv) {
                detail::mpi_check(code, call_);
                return;
            }
            int error_class = MPI_SUCCESS;
            if (code != MPI_SUCCESS) MPI_Error_class(code, &error_class);
            if (code != MPI_SUCCESS && error_class != MPI_ERR_TRUNCATE) {
                detail::mpi_check(code, "MPI_Wait (irecv)");
            }
            int received = 0;
            bool counted = MPI_Get_count(&status, MPI_BYTE, &received) == MPI_SUCCESS &&
                           received != MPI_UNDEFINED;
            if (error_class == MPI_ERR_TRUNCATE) {
                // MPI may report the truncated count; only a count above the buffer is the size.
                throw error(text() + " has a buffer of " + std::to_string(bytes_) +
                            " bytes but the message has " +
                            (counted && static_cast<std::size_t>(received) > bytes_
                                 ? std::to_string(received)
                                 : "more than " + std::to_string(bytes_)) +
                            " bytes; the receive buffer must be exactly the message size");
            }
            if (counted && static_cast<std::size_t>(received) != bytes_) {
                throw error(text() + " has a buffer of " + std::to_string(bytes_) +
                            " bytes but the message has " + std::to_string(received) +
                            " bytes; the receive buffer must be exactly the message size");
            }
        }

    private:
        friend class mpi;
        enum class kind { send, recv, collective };

        std::string text() const {
            return "irecv(source=" + std::to_string(peer_) + ", tag=" + std::to_string(tag_) + ")";
        }

        // Past the timeout: a receive is cancelled (and given a moment to confirm it, as a
        // message may be half-way in), anything else is left to MPI with its buffers (MPI
        // forbids cancelling a collective); then the error names what waited on whom.
        [[noreturn]] void give_up(timeout_clock::time_point start) {
            const double waited = std::chrono::duration<double>(timeout_clock::now() - start).count();
            if (kind_ == kind::recv) {
                MPI_Cancel(&handle_);
                MPI_Status ignored{};
                int code = MPI_SUCCESS;
                detail::mpi_test_until(handle_, ignored, timeout_clock::now() + std::chrono::seconds(1), code);
            }
            forget();
            timeout_error::details d;
            d.rank = group_ ? group_->world_rank : 0;
            d.waited_seconds = waited;
            d.timeout_seconds = timeout_seconds(timeout_);
            switch (kind_) {
                case kind::recv:
                case kind::send:
                    d.operation = std::string(kind_ == kind::recv ? "irecv(source=" : "isend(dest=") +
                                  std::to_string(peer_) + ", tag=" + std::to_string(tag_) + ") of " +
                                  std::to_string(bytes_) + " bytes";
                    d.peers = {group_ ? group_->world_of(peer_) : peer_};
                    break;
                case kind::collective:
                    d.operation = std::string(what_) +
                                  (count_ != 0 ? " of " + std::to_string(count_) + " elements" : std::string()) +
                                  (group_ ? " " + group_->members() : std::string());
                    break;
            }
            detail::mpi_timeout_unwinding = true;
            throw timeout_error(std::move(d));
        }

        // Leaves a pending operation to MPI: its handle is dropped, and the internal buffer
        // it may still write is leaked on purpose (a few bytes, once per timeout).
        void forget() noexcept {
            handle_ = MPI_REQUEST_NULL;
            static_cast<void>(scratch_.release());
        }

        void abandon() noexcept {
            if (handle_ == MPI_REQUEST_NULL || !detail::mpi_usable()) return;
            if (kind_ == kind::recv) MPI_Cancel(&handle_);
            const bool hurry = detail::mpi_timeout_unwinding && std::uncaught_exceptions() > 0;
            MPI_Status ignored{};
            int code = MPI_SUCCESS;
            if (!detail::mpi_test_until(handle_, ignored, hurry ? timeout_clock::now() : deadline_after(timeout_),
                                        code)) {
                forget();
            }
            handle_ = MPI_REQUEST_NULL;
        }

        MPI_Request handle_ = MPI_REQUEST_NULL;
        kind kind_ = kind::send;
        const char* call_ = "MPI_Wait (isend)";  // what a failed wait names, for sends and collectives
        const char* what_ = "";                 // a collective's name, for a timeout's message
        std::size_t bytes_ = 0;
        std::size_t count_ = 0;  // a collective's elements (per rank's block where it has blocks)
        int peer_ = 0;
        int tag_ = 0;
        timeout_duration timeout_ = default_timeout;
        std::shared_ptr<const detail::mpi_group> group_;
        std::unique_ptr<std::int64_t[]> scratch_;  // the length check's operands
    };

    // MPI_COMM_WORLD, not owned. Sets MPI_ERRORS_RETURN on it.
    [[nodiscard]] static mpi world() {
        if (!detail::mpi_usable()) {
            throw error("mpi::world() needs MPI to be initialised and not finalised "
                        "(create a weft::comm::mpi_environment, or call MPI_Init, first)");
        }
        return mpi(MPI_COMM_WORLD);
    }

    // Wraps `comm`; when `owned`, the destructor frees it with MPI_Comm_free. Its timeout
    // starts at default_timeout.
    explicit mpi(MPI_Comm comm, bool owned = false) : comm_(comm), owned_(owned) {
        if (comm == MPI_COMM_NULL) throw error("mpi(comm) got MPI_COMM_NULL; a communicator is needed");
        if (!detail::mpi_usable()) throw error("mpi(comm) needs MPI to be initialised and not finalised");
        detail::mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        detail::mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        detail::mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
        group_ = detail::mpi_group_of(comm_, rank_, size_);
    }

    mpi(mpi&& other) noexcept
        : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
          owned_(std::exchange(other.owned_, false)),
          rank_(other.rank_),
          size_(other.size_),
          timeout_(other.timeout_),
          group_(std::move(other.group_)) {}
    mpi& operator=(mpi&& other) noexcept {
        if (this != &other) {
            release();
            comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
            owned_ = std::exchange(other.owned_, false);
            rank_ = other.rank_;
            size_ = other.size_;
            timeout_ = other.timeout_;
            group_ = std::move(other.group_);
        }
        return *this;
    }
    mpi(const mpi&) = delete;
    mpi& operator=(const mpi&) = delete;
    ~mpi() { release(); }

    [[nodiscard]] int rank() const { return rank_; }
    [[nodiscard]] int size() const { return size_; }
    [[nodiscard]] MPI_Comm native() const { return comm_; }

    // How long any wait on a peer (a request's wait, a blocking collective, split) may take
    // before it throws timeout_error; > 0, no_timeout (or anything from 100 years) waits
    // forever. Communicators made by split() start with this one's. Requests keep the
    // timeout they were started with.
    template <class Rep, class Period>
    void set_timeout(std::chrono::duration<Rep, Period> timeout) {
        timeout_ = checked_timeout(timeout);
    }
    [[nodiscard]] timeout_duration timeout() const { return timeout_; }

    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        check_usable();
        detail::check_peer("dest", dest, size_);
        detail::check_tag(tag);
        request r = make_request(request::kind::send);
        r.bytes_ = data.size();
        r.peer_ = dest;
        r.tag_ = tag;
        detail::mpi_check(MPI_Isend(data.data(),
                                    detail::mpi_count(data.size(), "data.size()"), MPI_BYTE, dest,
                                    tag, comm_, &r.handle_),
                          "MPI_Isend");
        return r;
    }

    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        check_usable();
        detail::check_peer("source", source, size_);
        detail::check_tag(tag);
        request r = make_request(request::kind::recv);
        r.bytes_ = buffer.size();
        r.peer_ = source;
        r.tag_ = tag;
        detail::mpi_check(MPI_Irecv(buffer.data(), detail::mpi_count(buffer.size(), "buffer.size()"),
                                    MPI_BYTE, source, tag, comm_, &r.handle_),
                          "MPI_Irecv");
        return r;
    }

    // Allreduce: every rank gets the same values, but the summation order is MPI's (it may
    // differ from rank order 0..n-1, unlike comm::local).
    //
    // The blocking collectives run MPI's non-blocking ones and poll them: a blocking MPI call
    // cannot give up at a timeout. Open MPI picks other algorithms (libnbc's) for those than
    // for the blocking calls, e.g. allreduce is 1.3-1.5x slower (docs/performance.md); a
    // communicator set to no_timeout calls MPI's blocking functions instead.
    void allreduce_sum(std::span<float> values) { allreduce(values, MPI_FLOAT, "allreduce_sum(float)"); }
    void allreduce_sum(std::span<double> values) { allreduce(values, MPI_DOUBLE, "allreduce_sum(double)"); }
    // Allgather: all[r*n, (r+1)*n) = rank r's `mine` (n = mine.size()).
    void allgather(std::span<const float> mine, std::span<float> all) {
        allgather_blocking(mine, all, MPI_FLOAT, "allgather(float)");
    }
    void allgather(std::span<const double> mine, std::span<double> all) {
        allgather_blocking(mine, all, MPI_DOUBLE, "allgather(double)");
    }
    // Reduce_scatter_block: mine = the sum over ranks of their block rank() of `all`.
    void reduce_scatter_sum(std::span<const float> all, std::span<float> mine) {
        reduce_scatter_blocking(all, mine, MPI_FLOAT, "reduce_scatter_sum(float)");
    }
    void reduce_scatter_sum(std::span<const double> all, std::span<double> mine) {
        reduce_scatter_blocking(all, mine, MPI_DOUBLE, "reduce_scatter_sum(double)");
    }

    // Non-blocking forms (MPI_Iallreduce, MPI_Iallgather, MPI_Ireduce_scatter_block): the
    // buffers belong to the operation until wait(). The lengths are agreed on first, with
    // a small reduction, so a mismatch is an error on every rank instead of a hang.
    [[nodiscard]] request iallreduce_sum(std::span<float> values) {
        return start_allreduce(values, MPI_FLOAT, "iallreduce_sum(float)");
    }
    [[nodiscard]] request iallreduce_sum(std::span<double> values) {
        return start_allreduce(values, MPI_DOUBLE, "iallreduce_sum(double)");
    }
    [[nodiscard]] request iallgather(std::span<const float> mine, std::span<float> all) {
        return start_allgather(mine, all, MPI_FLOAT, "iallgather(float)");
    }
    [[nodiscard]] request iallgather(std::span<const double> mine, std::span<double> all) {
        return start_allgather(mine, all, MPI_DOUBLE, "iallgather(double)");
    }
    [[nodiscard]] request ireduce_scatter_sum(std::span<const float> all, std::span<float> mine) {
        return start_reduce_scatter(all, mine, MPI_FLOAT, "ireduce_scatter_sum(float)");
    }
    [[nodiscard]] request ireduce_scatter_sum(std::span<const double> all, std::span<double> mine) {
        return start_reduce_scatter(all, mine, MPI_DOUBLE, "ireduce_scatter_sum(double)");
    }

    void broadcast(std::span<std::byte> data, int root) {
        check_usable();
        detail::check_peer("root", root, size_);
        agree("broadcast", data.size(), root);
        request r = make_collective("broadcast", data.size(), "MPI_Wait (MPI_Ibcast)");
        detail::mpi_check(MPI_Ibcast(data.data(), detail::mpi_count(data.size(), "data.size()"), MPI_BYTE, root,
                                     comm_, &r.handle_),
                          "MPI_Ibcast");
        r.wait();
    }

    void barrier() {
        check_usable();
        request r = make_collective("barrier()", 0, "MPI_Wait (MPI_Ibarrier)");
        detail::mpi_check(MPI_Ibarrier(comm_, &r.handle_), "MPI_Ibarrier");
        r.wait();
    }

    // MPI_Comm_split; the result owns the new communicator and has this one's timeout.
    // MPI_Comm_split blocks and has no non-blocking form, so the ranks first meet in a
    // polled barrier: a rank that never comes is a timeout there, not a hang in the split.
    [[nodiscard]] mpi split(int color, int key) {
        check_usable();
        require(color >= 0, "color", color, "must be >= 0 (every rank joins one group)");
        {
            request r = make_collective("split()", 0, "MPI_Wait (MPI_Ibarrier before MPI_Comm_split)");
            detail::mpi_check(MPI_Ibarrier(comm_, &r.handle_), "MPI_Ibarrier (before MPI_Comm_split)");
            r.wait();
        }
        MPI_Comm comm = MPI_COMM_NULL;
        detail::mpi_check(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split");
        mpi result(comm, true);
        result.timeout_ = timeout_;
        return result;
    }

private:
    void check_usable() const {
        if (comm_ == MPI_COMM_NULL) throw error("use of a moved-from weft::comm::mpi");
        if (!detail::mpi_usable()) throw error("weft::comm::mpi used after MPI_Finalize");
    }

    void release() noexcept {
        if (owned_ && comm_ != MPI_COMM_NULL && detail::mpi_usable()) MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
        owned_ = false;
    }

    request make_request(request::kind kind) const {
        request r;
        r.kind_ = kind;
        r.timeout_ = timeout_;
        r.group_ = group_;
        return r;
    }

    // `what` and `call` must outlive the request: string literals.
    request make_collective(const char* what, std::size_t count, const char* call) const {
        request r = make_request(request::kind::collective);
        r.what_ = what;
        r.count_ = count;
        r.call_ = call;
        return r;
    }

    // Mismatched lengths or roots make MPI truncate, hang or misread silently, so every
    // collective first agrees on them with one small allreduce (max of x and -x gives
    // both the max and the min): every rank then throws the same error, or none does.
    // The operands live on the heap, owned by the request: after a timeout MPI may still
    // write them.
    void agree(const char* what, std::size_t count, int root) {
        request r = make_collective(what, count, "MPI_Wait (MPI_Iallreduce, length check)");
        r.scratch_.reset(new std::int64_t[4]{static_cast<std::int64_t>(count), -static_cast<std::int64_t>(count),
                                             root, -root});
        std::int64_t* values = r.scratch_.get();
        detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, values, 4, MPI_INT64_T, MPI_MAX, comm_, &r.handle_),
                          "MPI_Iallreduce (length check)");
        r.wait();
        if (values[0] != -values[1]) {
            throw error("collective mismatch: ranks called " + std::string(what) +
                        " with lengths from " + std::to_string(-values[1]) + " to " +
                        std::to_string(values[0]) + " (this rank: " + std::to_string(count) +
                        "); every rank of a group must pass the same length");
        }
        if (values[2] != -values[3]) {
            throw error("collective mismatch: ranks called " + std::string(what) +
                        " with roots from " + std::to_string(-values[3]) + " to " +
                        std::to_string(values[2]) + "; every rank must pass the same root");
        }
    }

    template <class T>
    void allreduce(std::span<T> values, MPI_Datatype type, const char* what) {
        if (timeout_ != no_timeout) return start_allreduce(values, type, what).wait();
        check_usable();
        agree(what, values.size(), 0);
        detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, values.data(),
                                        detail::mpi_count(values.size(), "values.size()"), type, MPI_SUM, comm_),
                          "MPI_Allreduce");
    }

    template <class T>
    void allgather_blocking(std::span<const T> mine, std::span<T> all, MPI_Datatype type, const char* what) {
        if (timeout_ != no_timeout) return start_allgather(mine, all, type, what).wait();
        const int count = agreed_block_count(what, all.size(), mine.size());
        detail::mpi_check(MPI_Allgather(mine.data(), count, type, all.data(), count, type, comm_), "MPI_Allgather");
    }

    template <class T>
    void reduce_scatter_blocking(std::span<const T> all, std::span<T> mine, MPI_Datatype type, const char* what) {
        if (timeout_ != no_timeout) return start_reduce_scatter(all, mine, type, what).wait();
        const int count = agreed_block_count(what, all.size(), mine.size());
        detail::mpi_check(MPI_Reduce_scatter_block(all.data(), mine.data(), count, type, MPI_SUM, comm_),
                          "MPI_Reduce_scatter_block");
    }

    template <class T>
    request start_allreduce(std::span<T> values, MPI_Datatype type, const char* what) {
        check_usable();
        agree(what, values.size(), 0);
        request r = make_collective(what, values.size(), "MPI_Wait (MPI_Iallreduce)");
        detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, values.data(),
                                         detail::mpi_count(values.size(), "values.size()"), type, MPI_SUM,
                                         comm_, &r.handle_),
                          "MPI_Iallreduce");
        return r;
    }

    template <class T>
    request start_allgather(std::span<const T> mine, std::span<T> all, MPI_Datatype type, const char* what) {
        const int count = agreed_block_count(what, all.size(), mine.size());
        request r = make_collective(what, mine.size(), "MPI_Wait (MPI_Iallgather)");
        detail::mpi_check(MPI_Iallgather(mine.data(), count, type, all.data(), count, type, comm_, &r.handle_),
                          "MPI_Iallgather");
        return r;
    }

    template <class T>
    request start_reduce_scatter(std::span<const T> all, std::span<T> mine, MPI_Datatype type, const char* what) {
        const int count = agreed_block_count(what, all.size(), mine.size());
        request r = make_collective(what, mine.size(), "MPI_Wait (MPI_Ireduce_scatter_block)");
        detail::mpi_check(MPI_Ireduce_scatter_block(all.data(), mine.data(), count, type, MPI_SUM, comm_, &r.handle_),
                          "MPI_Ireduce_scatter_block");
        return r;
    }

    // What every all-gather and reduce-scatter, blocking or not, checks first: the full
    // buffer holds one block per rank, and all ranks agree on the block length. Returns
    // the block length as MPI's count.
    int agreed_block_count(const char* what, std::size_t full, std::size_t block) {
        check_usable();
        require(full == block * static_cast<std::size_t>(size_), std::string(what) + ": all.size()", full,
                "must be size() * mine.size() = " + std::to_string(static_cast<std::size_t>(size_) * block));
        agree(what, block, 0);
        return detail::mpi_count(block, "mine.size()");
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    bool owned_ = false;
    int rank_ = 0;
    int size_ = 0;
    timeout_duration timeout_ = default_timeout;
    std::shared_ptr<const detail::mpi_group> group_;
};

static_assert(communicator<mpi>);

}  // namespace weft::comm
