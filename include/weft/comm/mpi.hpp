// The communicator over an MPI communicator, for mpirun-launched programs. Every MPI
// call's return code is checked (MPI_ERRORS_RETURN is set on the communicator) and
// turned into a weft::error that names the call and MPI's own message. Every wait on a
// peer is watched (weft/comm/watchdog.hpp): it publishes what it waits for, and a monitor
// thread ends the process with a report when it waits longer than the communicator's
// timeout, so a stopped or dead peer never hangs the job silently. The waits themselves
// are MPI's own blocking calls, at their full speed.
#pragma once

#include "weft/comm/mpi_header.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/mpi_deferred.hpp"
#include "weft/comm/mpi_errors.hpp"
#include "weft/comm/mpi_fault.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/comm/watchdog.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

namespace detail {

// MPI counts are int; larger buffers would be silently cut.
inline int mpi_count(std::size_t count, std::string_view parameter) {
    require(count <= static_cast<std::size_t>(INT_MAX), parameter, count,
            "must have at most INT_MAX (" + std::to_string(INT_MAX) + ") elements for MPI");
    return static_cast<int>(count);
}

// Who is in a communicator, in MPI_COMM_WORLD's numbering: a report names peers by their
// world rank, the number mpirun and the user see. Computed once per communicator.
inline const watch_group* mpi_watch_group(MPI_Comm comm, int rank, int size) {
    std::vector<int> ranks(static_cast<std::size_t>(size));
    std::iota(ranks.begin(), ranks.end(), 0);
    std::vector<int> world_ranks = ranks;
    MPI_Group mine = MPI_GROUP_NULL;
    MPI_Group world = MPI_GROUP_NULL;
    if (MPI_Comm_group(comm, &mine) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
        // Only reports depend on it: on failure the group's own numbers stand in.
        if (MPI_Group_translate_ranks(mine, size, ranks.data(), world, world_ranks.data()) != MPI_SUCCESS)
            world_ranks = ranks;
    }
    if (mine != MPI_GROUP_NULL) MPI_Group_free(&mine);
    if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
    const int world_rank = rank >= 0 && rank < size ? world_ranks[static_cast<std::size_t>(rank)] : rank;
    return intern_watch_group(world_rank, std::move(world_ranks));
}

}  // namespace detail

class mpi {
public:
    // What it moves: buffers are host memory (weft does not assume a CUDA-aware MPI).
    using memory_space = weft::host_space;

    // A non-blocking MPI operation. Destroying a request that was not waited for:
    // a receive is cancelled (MPI_Cancel, then MPI_Wait), so its buffer is never written
    // afterwards; a send or a collective is waited for, because MPI has no safe way to
    // abandon one whose buffer is about to go away (MPI_Request_free would leave it
    // reading freed memory). Errors in the destructor are swallowed, and nothing is done
    // once MPI is finalised. Both waits are watched with the timeout of the communicator
    // that started the request.
    class request {
    public:
        request() = default;
        request(request&& other) noexcept
            : handle_(std::exchange(other.handle_, MPI_REQUEST_NULL)),
              call_(other.call_),
              info_(other.info_),
              deferred_(std::move(other.deferred_)),
              queue_(std::move(other.queue_)) {}
        request& operator=(request&& other) noexcept {
            if (this != &other) {
                abandon();
                handle_ = std::exchange(other.handle_, MPI_REQUEST_NULL);
                call_ = other.call_;
                info_ = other.info_;
                deferred_ = std::move(other.deferred_);
                queue_ = std::move(other.queue_);
            }
            return *this;
        }
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        ~request() { abandon(); }

        // Waiting again, or on a moved-from request, does nothing.
        void wait() {
            if (deferred_) take_deferred();
            if (handle_ == MPI_REQUEST_NULL) return;
            detail::deferred_registry::instance().progress();  // other groups' collectives go on meanwhile
            MPI_Status status{};
            int code = MPI_SUCCESS;
            {
                const wait_scope watched(info_);
                code = MPI_Wait(&handle_, &status);
            }
            handle_ = MPI_REQUEST_NULL;
            if (info_.kind != wait_kind::recv) {
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
                throw error(text() + " has a buffer of " + std::to_string(info_.amount) +
                            " bytes but the message has " +
                            (counted && static_cast<std::size_t>(received) > info_.amount
                                 ? std::to_string(received)
                                 : "more than " + std::to_string(info_.amount)) +
                            " bytes; the receive buffer must be exactly the message size");
            }
            if (counted && static_cast<std::size_t>(received) != info_.amount) {
                throw error(text() + " has a buffer of " + std::to_string(info_.amount) +
                            " bytes but the message has " + std::to_string(received) +
                            " bytes; the receive buffer must be exactly the message size");
            }
        }

    private:
        friend class mpi;

        std::string text() const {
            return "irecv(source=" + std::to_string(info_.peer) + ", tag=" + std::to_string(info_.tag) + ")";
        }

        // A non-blocking collective's own request, once its agreement has settled (waiting for
        // it, and for those started before it on its communicator, in order): the collective's,
        // or the agreement's refusal as an error.
        void take_deferred() {
            const std::shared_ptr<detail::deferred_collective> c = std::move(deferred_);
            const std::shared_ptr<detail::deferred_queue> queue = std::move(queue_);
            if (!c->settled) queue->settle_through(c.get());
            if (!c->refusal.empty()) {
                // The refusal is a weft::error's text already ("weft: ..."): thrown as it was.
                const std::string text = unprefixed(c->refusal);
                if (c->peer_failed) throw peer_lost(text);
                throw error(text);
            }
            handle_ = c->running;
        }

        void abandon() noexcept {
            if (deferred_ && detail::mpi_usable()) {
                try {
                    take_deferred();
                } catch (...) {  // refused: nothing was posted, nothing to wait for
                }
            }
            deferred_.reset();
            queue_.reset();
            if (handle_ == MPI_REQUEST_NULL || !detail::mpi_usable()) return;
            if (info_.kind == wait_kind::recv) MPI_Cancel(&handle_);
            const wait_scope watched(info_);
            MPI_Wait(&handle_, MPI_STATUS_IGNORE);
            handle_ = MPI_REQUEST_NULL;
        }

        MPI_Request handle_ = MPI_REQUEST_NULL;
        const char* call_ = "MPI_Wait (isend)";  // what a failed wait names, for sends and collectives
        wait_info info_;  // what the wait is, for the watchdog; amount: bytes (isend, irecv)
        // A non-blocking collective until its agreement settles (mpi_deferred.hpp), and the
        // queue of its communicator that settles it in order.
        std::shared_ptr<detail::deferred_collective> deferred_;
        std::shared_ptr<detail::deferred_queue> queue_;
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
    // starts at default_timeout, and the watchdog's monitor thread is started if it is not
    // running yet.
    explicit mpi(MPI_Comm comm, bool owned = false) : comm_(comm), owned_(owned) {
        if (comm == MPI_COMM_NULL) throw error("mpi(comm) got MPI_COMM_NULL; a communicator is needed");
        if (!detail::mpi_usable()) throw error("mpi(comm) needs MPI to be initialised and not finalised");
        detail::mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        detail::mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        detail::mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
        group_ = detail::mpi_watch_group(comm_, rank_, size_);
        detail::deferred_registry::instance().add(deferred_);
        detail::live_communicators::instance().add(comm_);
        start_watchdog();
    }

    mpi(mpi&& other) noexcept
        : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
          owned_(std::exchange(other.owned_, false)),
          rank_(other.rank_),
          size_(other.size_),
          timeout_(other.timeout_),
          group_(other.group_),
          deferred_(std::move(other.deferred_)) {}
    mpi& operator=(mpi&& other) noexcept {
        if (this != &other) {
            release();
            comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
            owned_ = std::exchange(other.owned_, false);
            rank_ = other.rank_;
            size_ = other.size_;
            timeout_ = other.timeout_;
            group_ = other.group_;
            deferred_ = std::move(other.deferred_);
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
    // before the watchdog reports it and ends the process (exit code 2); > 0, no_timeout (or
    // anything from 100 years) is not watched. Communicators made by split() start with this
    // one's. Requests keep the timeout they were started with.
    template <class Rep, class Period>
    void set_timeout(std::chrono::duration<Rep, Period> timeout) {
        timeout_ = checked_timeout(timeout);
    }
    [[nodiscard]] timeout_duration timeout() const { return timeout_; }

    // Lets MPI move messages on while the caller computes (the CPU kernels call it between
    // them through exec/kernel_progress.hpp). Open MPI advances a transfer only inside an MPI
    // call: a large message waits for its receiver to read it (single-copy) or, without
    // single-copy, for both sides to pass each fragment on, so without this an activation sent
    // at the start of a forward leaves when the receiver's forward ends. One MPI_Iprobe runs
    // the progress engine for every request of the process. Never throws and never waits: a
    // failure here is met by the next real call on the communicator.
    void progress() noexcept {
        if (comm_ == MPI_COMM_NULL) return;
        try {
            detail::deferred_registry::instance().progress();
        } catch (...) {  // the next wait reports it
        }
        int arrived = 0;
        static_cast<void>(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &arrived, MPI_STATUS_IGNORE));
    }

    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        check_usable();
        detail::deferred_registry::instance().progress();
        detail::check_peer("dest", dest, size_);
        detail::check_tag(tag);
        request r;
        r.info_ = point_to_point(wait_kind::send, data.size(), dest, tag);
        detail::mpi_check(MPI_Isend(data.data(),
                                    detail::mpi_count(data.size(), "data.size()"), MPI_BYTE, dest,
                                    tag, comm_, &r.handle_),
                          "MPI_Isend");
        return r;
    }

    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        check_usable();
        detail::deferred_registry::instance().progress();
        detail::check_peer("source", source, size_);
        detail::check_tag(tag);
        request r;
        r.info_ = point_to_point(wait_kind::recv, buffer.size(), source, tag);
        detail::mpi_check(MPI_Irecv(buffer.data(), detail::mpi_count(buffer.size(), "buffer.size()"),
                                    MPI_BYTE, source, tag, comm_, &r.handle_),
                          "MPI_Irecv");
        return r;
    }

    // MPI_Allreduce: every rank gets the same values, but the summation order is MPI's
    // (it may differ from rank order 0..n-1, unlike comm::local).
    void allreduce_sum(std::span<float> values) { allreduce(values, MPI_FLOAT, "allreduce_sum(float)"); }
    void allreduce_sum(std::span<double> values) { allreduce(values, MPI_DOUBLE, "allreduce_sum(double)"); }
    // MPI_Allgather: all[r*n, (r+1)*n) = rank r's `mine` (n = mine.size()). The blocking
    // forms call MPI's blocking functions: Open MPI picks other (faster, for small
    // buffers) algorithms for them than for the non-blocking ones.
    void allgather(std::span<const float> mine, std::span<float> all) {
        allgather_blocking(mine, all, MPI_FLOAT, "allgather(float)");
    }
    void allgather(std::span<const double> mine, std::span<double> all) {
        allgather_blocking(mine, all, MPI_DOUBLE, "allgather(double)");
    }
    // MPI_Reduce_scatter_block: mine = the sum over ranks of their block rank() of `all`.
    void reduce_scatter_sum(std::span<const float> all, std::span<float> mine) {
        reduce_scatter_blocking(all, mine, MPI_FLOAT, "reduce_scatter_sum(float)");
    }
    void reduce_scatter_sum(std::span<const double> all, std::span<double> mine) {
        reduce_scatter_blocking(all, mine, MPI_DOUBLE, "reduce_scatter_sum(double)");
    }

    // Non-blocking forms (MPI_Iallreduce, MPI_Iallgather, MPI_Ireduce_scatter_block): the
    // buffers belong to the operation until wait(). The lengths are agreed on first, so a
    // mismatch is an error on every rank (at wait()) instead of a hang, and the agreement
    // does not block the start: the collective is posted once it completes
    // (mpi_deferred.hpp). A start waits only for the agreement of this communicator's
    // previous non-blocking collective, if that is still running: MPI needs every rank to
    // start a communicator's collectives in the same order.
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
        agree("broadcast", data.size(), root);  // settles the deferred collectives first
        const wait_scope watched(collective("broadcast", data.size()));
        detail::mpi_check(MPI_Bcast(data.data(), detail::mpi_count(data.size(), "data.size()"),
                                    MPI_BYTE, root, comm_),
                          "MPI_Bcast");
    }

    void barrier() {
        check_usable();
        deferred_->settle_through();  // they come first, on every rank
        const wait_scope watched(collective("barrier()", 0));
        detail::mpi_check(MPI_Barrier(comm_), "MPI_Barrier");
    }

    // MPI_Comm_split; the result owns the new communicator and has this one's timeout.
    [[nodiscard]] mpi split(int color, int key) {
        check_usable();
        require(color >= 0, "color", color, "must be >= 0 (every rank joins one group)");
        deferred_->settle_through();  // they come first, on every rank
        MPI_Comm comm = MPI_COMM_NULL;
        {
            const wait_scope watched(collective("split()", 0));
            detail::mpi_check(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split");
        }
        mpi result(comm, true);
        result.timeout_ = timeout_;
        return result;
    }

    // ---- fault tolerance (MPI's ULFM; mpi_fault.hpp) -----------------------------------
    // After a comm::peer_lost: MPIX_Comm_shrink, a new communicator of the ranks still alive,
    // in this one's order, with this one's timeout. Collective over the survivors.
    [[nodiscard]] mpi shrink() {
#if WEFT_HAS_ULFM
        check_usable();
        MPI_Comm comm = MPI_COMM_NULL;
        {
            const wait_scope watched(collective("MPIX_Comm_shrink", 0));
            detail::mpi_check(MPIX_Comm_shrink(comm_, &comm), "MPIX_Comm_shrink");
        }
        mpi result(comm, true);
        result.timeout_ = timeout_;
        return result;
#else
        throw error("mpi::shrink() needs MPI's fault tolerance (ULFM): build against Open MPI 5 "
                    "(scripts/install-deps.sh --ft, cmake --preset ft) and run mpirun --with-ft ulfm");
#endif
    }
    // The ranks of this communicator known to have failed, in its numbering (ULFM; none
    // without it).
    [[nodiscard]] std::vector<int> failed_ranks() const {
        std::vector<int> out;
#if WEFT_HAS_ULFM
        MPI_Group failed = MPI_GROUP_NULL;
        MPI_Group mine = MPI_GROUP_NULL;
        if (MPIX_Comm_get_failed(comm_, &failed) != MPI_SUCCESS) return out;
        int count = 0;
        MPI_Group_size(failed, &count);
        if (count > 0 && MPI_Comm_group(comm_, &mine) == MPI_SUCCESS) {
            std::vector<int> in_failed(static_cast<std::size_t>(count));
            std::iota(in_failed.begin(), in_failed.end(), 0);
            out.resize(in_failed.size());
            MPI_Group_translate_ranks(failed, count, in_failed.data(), mine, out.data());
            std::sort(out.begin(), out.end());
        }
        if (mine != MPI_GROUP_NULL) MPI_Group_free(&mine);
        if (failed != MPI_GROUP_NULL) MPI_Group_free(&failed);
#endif
        return out;
    }
    // Uniform agreement (MPIX_Comm_agree): the AND of every live rank's `mine`, the same on
    // all of them even when a rank dies during the call; without ULFM an all-reduce of it.
    // A failure acknowledged here is not an error: the result still stands.
    [[nodiscard]] bool agree(bool mine) {
        check_usable();
        deferred_->settle_through();
#if WEFT_HAS_ULFM
        int flag = mine ? 1 : 0;
        int code = MPI_SUCCESS;
        {
            const wait_scope watched(collective("MPIX_Comm_agree", 1));
            code = MPIX_Comm_agree(comm_, &flag);
        }
        if (code != MPI_SUCCESS && detail::is_peer_failure(code)) {
            // A failure this rank had not acknowledged: acknowledge it and agree again, so the
            // result covers exactly the ranks alive now.
            int acknowledged = 0;
            MPIX_Comm_ack_failed(comm_, size_, &acknowledged);
            flag = mine ? 1 : 0;
            const wait_scope watched(collective("MPIX_Comm_agree", 1));
            code = MPIX_Comm_agree(comm_, &flag);
            if (code != MPI_SUCCESS && detail::is_peer_failure(code)) flag = 0;
            else detail::mpi_check(code, "MPIX_Comm_agree");
            return flag != 0;
        }
        detail::mpi_check(code, "MPIX_Comm_agree");
        return flag != 0;
#else
        double value[1] = {mine ? 0.0 : 1.0};
        allreduce_sum(std::span<double>(value));
        return value[0] == 0;
#endif
    }

private:
    void check_usable() const {
        if (comm_ == MPI_COMM_NULL) throw error("use of a moved-from weft::comm::mpi");
        if (!detail::mpi_usable()) throw error("weft::comm::mpi used after MPI_Finalize");
    }

    [[nodiscard]] wait_info point_to_point(wait_kind kind, std::size_t bytes, int peer, int tag) const {
        return {.operation = "", .kind = kind, .peer = peer, .tag = tag, .amount = bytes, .group = group_,
                .timeout = timeout_};
    }

    // `what` must be a string literal: the watch record keeps the pointer.
    [[nodiscard]] wait_info collective(const char* what, std::size_t count) const {
        return {.operation = what, .kind = wait_kind::collective, .peer = -1, .tag = 0, .amount = count,
                .group = group_, .timeout = timeout_};
    }

    void release() noexcept {
        // A deferred collective posts on comm_: post what is pending before it is freed.
        if (deferred_ && comm_ != MPI_COMM_NULL && detail::mpi_usable()) {
            try {
                deferred_->settle_through();
            } catch (...) {  // a destructor's path: the requests report their own failures
            }
        }
        if (comm_ != MPI_COMM_NULL) detail::live_communicators::instance().remove(comm_);
        if (owned_ && comm_ != MPI_COMM_NULL && detail::mpi_usable()) MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
        owned_ = false;
    }

    // Mismatched lengths or roots make MPI truncate, hang or misread silently, so every
    // collective first agrees on them with one small MPI_Allreduce (max of x and -x gives
    // both the max and the min): every rank then throws the same error, or none does.
    void agree(const char* what, std::size_t count, int root) {
        deferred_->settle_through();  // the non-blocking collectives started before come first
        std::int64_t values[4] = {static_cast<std::int64_t>(count), -static_cast<std::int64_t>(count),
                                  root, -root};
        const wait_scope watched(collective(what, count));
        detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, values, 4, MPI_INT64_T, MPI_MAX, comm_),
                          "MPI_Allreduce (length check)");
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
        check_usable();
        agree(what, values.size(), 0);
        const wait_scope watched(collective(what, values.size()));
        detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, values.data(),
                                        detail::mpi_count(values.size(), "values.size()"), type,
                                        MPI_SUM, comm_),
                          "MPI_Allreduce");
    }

    template <class T>
    void allgather_blocking(std::span<const T> mine, std::span<T> all, MPI_Datatype type, const char* what) {
        const int count = agreed_block_count(what, all.size(), mine.size());
        const wait_scope watched(collective(what, mine.size()));
        detail::mpi_check(MPI_Allgather(mine.data(), count, type, all.data(), count, type, comm_), "MPI_Allgather");
    }

    template <class T>
    void reduce_scatter_blocking(std::span<const T> all, std::span<T> mine, MPI_Datatype type, const char* what) {
        const int count = agreed_block_count(what, all.size(), mine.size());
        const wait_scope watched(collective(what, mine.size()));
        detail::mpi_check(MPI_Reduce_scatter_block(all.data(), mine.data(), count, type, MPI_SUM, comm_),
                          "MPI_Reduce_scatter_block");
    }

    template <class T>
    request start_allreduce(std::span<T> values, MPI_Datatype type, const char* what) {
        check_usable();
        const int count = detail::mpi_count(values.size(), "values.size()");
        return start_deferred(what, values.size(), "MPI_Iallreduce", "MPI_Wait (MPI_Iallreduce)",
                              [=, comm = comm_](MPI_Request* r) {
                                  return MPI_Iallreduce(MPI_IN_PLACE, values.data(), count, type, MPI_SUM, comm, r);
                              });
    }

    template <class T>
    request start_allgather(std::span<const T> mine, std::span<T> all, MPI_Datatype type, const char* what) {
        const int count = block_count(what, all.size(), mine.size());
        return start_deferred(what, mine.size(), "MPI_Iallgather", "MPI_Wait (MPI_Iallgather)",
                              [=, comm = comm_](MPI_Request* r) {
                                  return MPI_Iallgather(mine.data(), count, type, all.data(), count, type, comm, r);
                              });
    }

    template <class T>
    request start_reduce_scatter(std::span<const T> all, std::span<T> mine, MPI_Datatype type, const char* what) {
        const int count = block_count(what, all.size(), mine.size());
        return start_deferred(what, mine.size(), "MPI_Ireduce_scatter_block", "MPI_Wait (MPI_Ireduce_scatter_block)",
                              [=, comm = comm_](MPI_Request* r) {
                                  return MPI_Ireduce_scatter_block(all.data(), mine.data(), count, type, MPI_SUM,
                                                                   comm, r);
                              });
    }

    // Posts the agreement of a non-blocking collective of `count` elements; `post` starts the
    // collective once the agreement has found every rank's count equal (mpi_deferred.hpp).
    request start_deferred(const char* what, std::size_t count, const char* post_call, const char* wait_call,
                           std::function<int(MPI_Request*)> post) {
        deferred_->settle_through();  // the ones started before come first, on every rank
        auto c = std::make_shared<detail::deferred_collective>();
        const auto n = static_cast<std::int64_t>(count);
        c->agreement[0] = n;
        c->agreement[1] = -n;
        c->info = collective(what, count);
        c->post = std::move(post);
        c->post_call = post_call;
        detail::mpi_check(
            MPI_Iallreduce(MPI_IN_PLACE, c->agreement, 4, MPI_INT64_T, MPI_MAX, comm_, &c->agreeing),
            "MPI_Iallreduce (length check)");
        deferred_->push(c);
        request r;
        r.info_ = c->info;
        r.call_ = wait_call;
        r.deferred_ = std::move(c);
        r.queue_ = deferred_;
        return r;
    }

    // The block length of an all-gather or reduce-scatter as MPI's count, once the full buffer
    // is checked to hold one block per rank (on this rank; ranks agree on the block after).
    int block_count(const char* what, std::size_t full, std::size_t block) const {
        check_usable();
        require(full == block * static_cast<std::size_t>(size_), std::string(what) + ": all.size()", full,
                "must be size() * mine.size() = " + std::to_string(static_cast<std::size_t>(size_) * block));
        return detail::mpi_count(block, "mine.size()");
    }

    // What every all-gather and reduce-scatter, blocking or not, checks first: the full
    // buffer holds one block per rank, and all ranks agree on the block length. Returns
    // the block length as MPI's count.
    int agreed_block_count(const char* what, std::size_t full, std::size_t block) {
        const int count = block_count(what, full, block);
        agree(what, block, 0);
        return count;
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    bool owned_ = false;
    int rank_ = 0;
    int size_ = 0;
    timeout_duration timeout_ = default_timeout;
    const watch_group* group_ = nullptr;  // interned: never freed
    // Its non-blocking collectives whose agreement is still running (mpi_deferred.hpp).
    std::shared_ptr<detail::deferred_queue> deferred_ = std::make_shared<detail::deferred_queue>();
};

static_assert(communicator<mpi>);

}  // namespace weft::comm
