// The communicator over NCCL, for GPU training: spans are DEVICE memory, and every
// operation is stream-ordered on a communication stream the communicator owns, joined to
// the caller's compute stream by CUDA events, so the host waits only where asked to. A
// collective may also take host memory (a training loop's scalar reductions): that goes
// through a device copy and completes on the host before the call returns.
// Link weft::nccl (and weft::mpi for nccl::from_mpi). Semantics: docs/nccl.md.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/comm/abort_on_timeout.hpp"
#include "weft/comm/blocking_collectives.hpp"
#include "weft/comm/communicator.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/poll_until.hpp"
#include "weft/gpu/device_buffer.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream.hpp"

#if defined(WEFT_HAS_MPI)
#include "weft/comm/mpi_header.hpp"

#include "weft/comm/mpi.hpp"
#endif

namespace weft::comm {

namespace detail {

// Throws weft::error("<call> failed: <NCCL's text> (<NCCL's last error>)") unless success.
inline void nccl_check(ncclResult_t result, std::string_view call) {
    if (result == ncclSuccess) return;
    std::string message(call);
    message.append(" failed: ").append(ncclGetErrorString(result));
    const char* last = ncclGetLastError(nullptr);  // NCCL ignores the argument
    if (last != nullptr && *last != '\0') message.append(" (").append(last).append(")");
    throw error(message);
}

template <class T>
inline constexpr ncclDataType_t nccl_type = std::is_same_v<T, float> ? ncclFloat32 : ncclFloat64;

// Makes `device` current for one scope and restores the caller's device afterwards, so
// that a communicator never changes which device the rest of the program talks to.
class nccl_device_guard {
public:
    explicit nccl_device_guard(int device) {
        gpu::check(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) {
            gpu::check(cudaSetDevice(device), "cudaSetDevice");
            changed_ = true;
        }
    }
    nccl_device_guard(const nccl_device_guard&) = delete;
    nccl_device_guard& operator=(const nccl_device_guard&) = delete;
    ~nccl_device_guard() {
        if (changed_) static_cast<void>(cudaSetDevice(previous_));
    }

private:
    int previous_ = 0;
    bool changed_ = false;
};

inline void check_nccl_device(int device) {
    const int count = gpu::device_count();
    require(device >= 0 && device < count, "device", device,
            "must be a CUDA device of this machine, in [0, " + std::to_string(count) + ")" +
                (count == 0 ? " (there is no usable GPU)" : ""));
}

// What the driver knows of `pointer`: host, device or managed memory, and whose device.
inline cudaPointerAttributes attributes_of(const void* pointer) {
    cudaPointerAttributes attributes{};
    gpu::check(cudaPointerGetAttributes(&attributes, pointer), "cudaPointerGetAttributes");
    return attributes;
}

// Host memory (pageable, or pinned with cudaHostAlloc) rather than device or managed memory.
inline bool is_host_memory(const cudaPointerAttributes& attributes) {
    return attributes.type == cudaMemoryTypeUnregistered || attributes.type == cudaMemoryTypeHost;
}

// NCCL reads and writes through device pointers; a host pointer would be a device fault
// (which poisons the whole CUDA context), so it is refused here with a readable message.
inline void check_device_attributes(const cudaPointerAttributes& attributes, std::string_view parameter,
                                    int device) {
    if (attributes.type == cudaMemoryTypeManaged) return;
    if (attributes.type != cudaMemoryTypeDevice) {
        throw error(std::string(parameter) + " is host memory; weft::comm::nccl needs device memory " +
                    "(cudaMalloc, cudaMallocManaged) of device " + std::to_string(device));
    }
    if (attributes.device != device) {
        throw error(std::string(parameter) + " is memory of device " + std::to_string(attributes.device) +
                    " but this communicator runs on device " + std::to_string(device));
    }
}

inline void check_device_memory(const void* pointer, std::size_t bytes, std::string_view parameter, int device) {
    if (bytes != 0) check_device_attributes(attributes_of(pointer), parameter, device);
}

// A collective's buffer in memory NCCL can use: a device or managed buffer as it is, or a
// device copy of a host buffer, copied up on the communication stream when made (if the
// collective reads it) and copied back by copy_back (if it writes it).
class staged_buffer {
public:
    // One driver query per buffer decides both whether to stage it and whether NCCL may use it.
    staged_buffer(const void* data, std::size_t bytes, bool read, std::string_view parameter, int device,
                  cudaStream_t stream)
        : device_(const_cast<void*>(data)), bytes_(bytes) {  // NOLINT: NCCL's API is not const
        if (bytes == 0) return;
        const cudaPointerAttributes attributes = attributes_of(data);
        if (!is_host_memory(attributes)) {
            check_device_attributes(attributes, parameter, device);
            return;
        }
        host_ = const_cast<void*>(data);  // NOLINT
        gpu::check(cudaMalloc(&device_, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes, " +
                                                    std::string(parameter) + " staged from host memory)");
        if (read) {
            const cudaError_t copied = cudaMemcpyAsync(device_, host_, bytes, cudaMemcpyHostToDevice, stream);
            if (copied != cudaSuccess) static_cast<void>(cudaFree(device_));
            gpu::check(copied, "cudaMemcpyAsync (" + std::string(parameter) + ", host to device)");
        }
    }
    staged_buffer(const staged_buffer&) = delete;
    staged_buffer& operator=(const staged_buffer&) = delete;
    // cudaFree waits for the device, so the copy is not freed under a running collective.
    ~staged_buffer() {
        if (host_ != nullptr) static_cast<void>(cudaFree(device_));
    }

    [[nodiscard]] bool staged() const { return host_ != nullptr; }
    [[nodiscard]] void* device() const { return device_; }
    // Enqueues the copy of the result back to host memory, after the collective.
    void copy_back(cudaStream_t stream) const {
        if (host_ != nullptr)
            gpu::check(cudaMemcpyAsync(host_, device_, bytes_, cudaMemcpyDeviceToHost, stream),
                       "cudaMemcpyAsync (staged result, device to host)");
    }

private:
    void* host_ = nullptr;  // the caller's host buffer when staged
    void* device_;
    std::size_t bytes_;
};

// The completion of one operation: an event recorded on the communication stream once the
// NCCL call is enqueued. Sends and receives are enqueued later, as one group (see flush).
struct nccl_completion {
    enum class status { pending, launched, dropped };
    gpu::event done;
    status state = status::pending;
    std::string what;
};

struct nccl_p2p {
    bool is_send = false;
    void* data = nullptr;
    std::size_t bytes = 0;
    int peer = 0;
    int tag = 0;
    std::shared_ptr<nccl_completion> done;
};

inline std::string nccl_p2p_text(const nccl_p2p& op) {
    return std::string(op.is_send ? "isend(dest=" : "irecv(source=") + std::to_string(op.peer) +
           ", tag=" + std::to_string(op.tag) + ", " + std::to_string(op.bytes) + " bytes)";
}

// Everything one NCCL communicator owns. Shared by the nccl object and its requests, so a
// request waited for after its communicator was destroyed is still valid.
class nccl_state {
public:
    nccl_state(int device_, cudaStream_t compute_) : device(device_), compute(compute_) {
        nccl_device_guard guard(device);
        stream.emplace(gpu::unfenced);
        ready.emplace();
        scratch.emplace();
        abort_on_timeout::registry().add(this, device, &abort_member, &idle_member);
    }
    nccl_state(const nccl_state&) = delete;
    nccl_state& operator=(const nccl_state&) = delete;

    ~nccl_state() {
        // First, so that no other thread's timeout aborts this communicator while it goes.
        abort_on_timeout::registry().remove(this);
        try {
            flush();
        } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report it
        }
        int previous = 0;
        const bool known = cudaGetDevice(&previous) == cudaSuccess;
        static_cast<void>(cudaSetDevice(device));
        if (comm != nullptr) {  // null once a timeout aborted it
            // What is still queued (a send nobody waited for) may finish; a receive or a send
            // whose peer never comes would hold the stream for ever, so the wait ends at the
            // communicator's timeout, or at an asynchronous error (a failed peer). Destroying
            // frees device memory, which waits for the whole GPU: the other communicators on
            // it must be idle too, since one stuck on a peer would hold the destroy for ever.
            const cudaStream_t queue = stream->get();
            bool failed = false;
            const bool drained = poll_until(
                [&] {
                    ncclResult_t async = ncclSuccess;
                    failed = ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess;
                    if (failed) return true;
                    return cudaStreamQuery(queue) != cudaErrorNotReady && abort_on_timeout::registry().all_idle(device);
                },
                deadline_after(timeout));
            if (!drained || failed) {
                std::fprintf(stderr,
                             "weft: comm::nccl (rank %d of %d) destroyed %s; aborting the NCCL communicators "
                             "on GPU %d\n",
                             rank, size,
                             failed ? "after an asynchronous NCCL error (a failed peer)"
                                    : "with communication on its GPU unfinished after its timeout",
                             device);
                // As a host wait past the timeout does: this communicator and every other one on
                // the GPU, all at once (abort_on_timeout.hpp says why).
                const abort_on_timeout::member self{this, device, &abort_member, &idle_member};
                abort_on_timeout::registry().abort_all(device, &self);
            } else {
                static_cast<void>(ncclCommDestroy(comm));
                comm = nullptr;
            }
        }
        scratch.reset();
        ready.reset();
        stream.reset();
        if (known) static_cast<void>(cudaSetDevice(previous));
    }

    // Makes the communication stream wait for everything enqueued on the compute stream so
    // far: the data an operation reads is then what the caller last wrote to it.
    void join_compute() {
        ready->record(compute);
        gpu::check(cudaStreamWaitEvent(stream->get(), ready->get(), 0), "cudaStreamWaitEvent (comm after compute)");
    }

    // Enqueues the pending sends and receives as one NCCL group, in the order they were
    // posted, and records their completion events after it. One group lets an exchange
    // (a ring, or a rank with itself) progress together instead of deadlocking.
    void flush() {
        if (pending.empty()) return;
        if (comm == nullptr) throw error("weft::comm::nccl used after a communication timeout aborted it");
        std::vector<nccl_p2p> batch = std::move(pending);
        pending.clear();
        auto drop = [&batch] {
            for (auto& op : batch) op.done->state = nccl_completion::status::dropped;
        };
        try {
            check_self_pairs(batch);
        } catch (...) {
            drop();
            throw;
        }
        nccl_device_guard guard(device);
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        ncclResult_t result = ncclSuccess;
        std::string failed;
        for (const auto& op : batch) {
            if (op.bytes == 0) continue;  // both sides skip: sizes must match
            result = op.is_send ? ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm, stream->get())
                                : ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm, stream->get());
            if (result != ncclSuccess) {
                failed = op.is_send ? "ncclSend" : "ncclRecv";
                break;
            }
        }
        const ncclResult_t ended = ncclGroupEnd();  // always closes the group
        if (result != ncclSuccess || ended != ncclSuccess) {
            drop();
            if (result != ncclSuccess) nccl_check(result, failed);
            nccl_check(ended, "ncclGroupEnd (sends and receives)");
        }
        for (auto& op : batch) {
            op.done->done.record(stream->get());
            op.done->state = nccl_completion::status::launched;
        }
    }

    // NCCL matches a rank's messages to itself only inside one group, in order, and does
    // not check sizes; a mismatch would hang the stream, so it is an error here instead.
    void check_self_pairs(const std::vector<nccl_p2p>& batch) const {
        std::vector<const nccl_p2p*> sends;
        std::vector<const nccl_p2p*> recvs;
        for (const auto& op : batch) {
            if (op.peer == rank) (op.is_send ? sends : recvs).push_back(&op);
        }
        for (std::size_t k = 0; k < sends.size() && k < recvs.size(); ++k) {
            if (sends[k]->bytes != recvs[k]->bytes) {
                throw error(nccl_p2p_text(*recvs[k]) + " has a buffer of " + std::to_string(recvs[k]->bytes) +
                            " bytes but the message (" + nccl_p2p_text(*sends[k]) + ") has " +
                            std::to_string(sends[k]->bytes) + " bytes; the receive buffer must be exactly " +
                            "the message size");
            }
        }
        if (sends.size() != recvs.size()) {
            const nccl_p2p& alone = sends.size() > recvs.size() ? *sends[recvs.size()] : *recvs[sends.size()];
            throw error(nccl_p2p_text(alone) + " with this rank itself has no matching " +
                        (alone.is_send ? "irecv" : "isend") +
                        " in the same batch; post both sides of an exchange before waiting on either "
                        "(NCCL pairs them only inside one group)");
        }
    }

    // Blocks the host until `event` (recorded after `what`) has completed on the device, an
    // asynchronous NCCL error shows, or the timeout passes. The timeout aborts the NCCL
    // communicator (ncclCommAbort), as PyTorch's watchdog does: that is what ends kernels
    // that wait on a peer which never comes, and frees the streams queued behind them.
    void host_wait(cudaEvent_t event, const std::string& what) {
        host_wait_for([event] { return cudaEventQuery(event); }, "cudaEventQuery", what);
    }
    // The same for everything enqueued on the communication stream so far.
    void drain(const std::string& what) {
        const cudaStream_t queue = stream->get();
        host_wait_for([queue] { return cudaStreamQuery(queue); }, "cudaStreamQuery", what);
    }
    template <class Query>
    void host_wait_for(Query query, const char* call, const std::string& what) {
        const auto start = timeout_clock::now();
        const bool done = poll_until(
            [&] {
                const cudaError_t status = query();
                if (status == cudaSuccess) return true;
                if (status != cudaErrorNotReady) gpu::check(status, std::string(call) + " (" + what + ")");
                check_async();
                return false;
            },
            deadline_after(timeout));
        if (!done) {
            // This communicator and every other one on the GPU: their streams may wait on
            // each other's (through the compute stream), and the shutdown after the error
            // must not hang on one left stuck.
            abort_on_timeout::registry().abort_all(device);
            throw timeout_error(
                {.rank = rank, .operation = what + " (NCCL rank " + std::to_string(rank) + " of " +
                                            std::to_string(size) + ")",
                 .peers = {},
                 .waited_seconds = std::chrono::duration<double>(timeout_clock::now() - start).count(),
                 .timeout_seconds = timeout_seconds(timeout), .action = {}});
        }
        check_async();
    }

    // Ends the communicator's kernels (ncclCommAbort) and leaves it unusable; again: nothing.
    void abort() noexcept {
        if (comm == nullptr) return;
        static_cast<void>(ncclCommAbort(comm));
        comm = nullptr;
    }
    // For the registry (comm/abort_on_timeout.hpp), which may call them from another thread
    // while this one waits.
    static void abort_member(void* self) noexcept { static_cast<nccl_state*>(self)->abort(); }
    static bool idle_member(void* self) noexcept {
        return cudaStreamQuery(static_cast<nccl_state*>(self)->stream->get()) != cudaErrorNotReady;
    }

    void check_async() const {
        if (comm == nullptr) throw error("weft::comm::nccl used after a communication timeout aborted it");
        ncclResult_t async = ncclSuccess;
        nccl_check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
        if (async != ncclSuccess) nccl_check(async, "an NCCL operation (asynchronous error)");
    }

    ncclComm_t comm = nullptr;
    int device = 0;
    int rank = 0;
    int size = 0;
    cudaStream_t compute = nullptr;
    // Optional so that the destructor can free them, in order, with `device` current.
    std::optional<gpu::stream> stream;     // the communication stream (unfenced: gpu/stream_registry.hpp says why)
    std::optional<gpu::event> ready;       // recorded on the compute stream per operation
    std::optional<gpu::device_buffer<float>> scratch;  // the barrier's one element
    std::vector<nccl_p2p> pending;         // posted sends/receives not yet enqueued
    timeout_duration timeout = default_timeout;  // of host waits (synchronize, barrier)
};

}  // namespace detail

// weft::communicator over an NCCL communicator (ncclComm_t) on one GPU. Not thread-safe:
// one thread drives one communicator, as with one MPI rank.
//
// Streams: operations run on the communicator's own stream. Each first makes that stream
// wait for the compute stream (so it reads what the caller wrote before the call) and
// records a completion event after the NCCL call. request.wait() makes the compute stream
// wait for that event (the host does not block); request.synchronize() blocks the host.
// Blocking collectives are start + wait: they return once enqueued, and anything the caller
// enqueues on the compute stream afterwards sees their result. A collective with a buffer
// in host memory is the exception: it is complete, its result in host memory, when the call
// returns (blocking or not). Sends and receives take device memory only.
//
// No tags: NCCL matches sends and receives per peer in the order they are posted, whatever
// the tag. The tag range is still checked, so a program valid here is valid on weft::mpi;
// but per peer, the receives must be posted in the order of the sends. isend/irecv are
// batched and enqueued as one NCCL group at the next wait(), synchronize(), collective,
// split or flush(): post both sides of an exchange before waiting on either.
class nccl : public blocking_collectives<nccl> {
public:
    // What it moves: every buffer is device memory on this rank's GPU.
    using memory_space = weft::device_space;
    // NCCL has no tags: per peer, a receive takes the next message sent (see the class note).
    static constexpr message_matching matching = message_matching::in_posting_order;

    class request {
    public:
        request() = default;
        request(request&&) noexcept = default;
        request& operator=(request&&) noexcept = default;
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        // Dropping a request neither cancels nor waits: the operation still runs in stream
        // order, the compute stream just does not wait for it.
        ~request() = default;

        // Stream-ordered: the compute stream (the one set when the operation was started)
        // waits for the operation. Waiting twice, or on a moved-from request, is harmless.
        void wait() {
            if (!done_) return;
            launch();
            detail::nccl_device_guard guard(device_);
            gpu::check(cudaStreamWaitEvent(compute_, done_->done.get(), 0),
                               "cudaStreamWaitEvent (" + done_->what + " wait)");
        }

        // Blocks the host until the operation has completed on the device; then reports an
        // asynchronous NCCL error (e.g. a failed peer) as a weft::error. Past the
        // communicator's timeout it aborts the NCCL communicator and throws timeout_error.
        void synchronize() {
            if (!done_) return;
            launch();
            detail::nccl_device_guard guard(device_);
            state_->host_wait(done_->done.get(), done_->what);
        }

    private:
        friend class nccl;
        request(std::shared_ptr<detail::nccl_state> state, std::shared_ptr<detail::nccl_completion> done)
            : state_(std::move(state)), done_(std::move(done)), compute_(state_->compute), device_(state_->device) {}

        void launch() {
            if (done_->state == detail::nccl_completion::status::pending) state_->flush();
            if (done_->state != detail::nccl_completion::status::launched) {
                throw error(done_->what + " was never started: the batch of sends and receives it " +
                            "belonged to failed (that error was thrown where the batch was flushed)");
            }
        }

        std::shared_ptr<detail::nccl_state> state_;
        std::shared_ptr<detail::nccl_completion> done_;
        cudaStream_t compute_ = nullptr;
        int device_ = 0;
    };

    // A communicator of one rank on `device` (no MPI needed): the identity for every
    // collective, sends to itself; useful for single-GPU runs and tests. `compute` is the
    // stream operations are ordered after (nullptr: the legacy default stream).
    [[nodiscard]] static nccl single(int device, cudaStream_t compute = nullptr) {
        detail::check_nccl_device(device);
        auto state = std::make_shared<detail::nccl_state>(device, compute);
        detail::nccl_device_guard guard(device);
        detail::nccl_check(ncclCommInitAll(&state->comm, 1, &device), "ncclCommInitAll");
        return nccl(std::move(state));
    }

#if defined(WEFT_HAS_MPI)
    // One rank per MPI rank of `world`, on `device` (typically the node-local rank modulo
    // the GPUs per node): rank 0 creates the ncclUniqueId, MPI broadcasts it, every rank
    // calls ncclCommInitRank. Collective over `world`; NCCL rank r is MPI rank r.
    [[nodiscard]] static nccl from_mpi(mpi& world, int device, cudaStream_t compute = nullptr) {
        if (world.native() == MPI_COMM_NULL) throw error("nccl::from_mpi got a moved-from weft::comm::mpi");
        // Agree that every rank has a usable device first: a rank that threw alone would
        // leave the others waiting in ncclCommInitRank forever.
        const int count = gpu::device_count();
        int ok = device >= 0 && device < count ? 1 : 0;
        int all_ok = 0;
        detail::mpi_check(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world.native()),
                          "MPI_Allreduce (nccl::from_mpi device check)");
        if (ok == 0) detail::check_nccl_device(device);
        if (all_ok == 0) throw error("nccl::from_mpi: another rank was given an unusable device (see its error)");

        ncclUniqueId id{};
        int id_status = ncclSuccess;
        if (world.rank() == 0) id_status = ncclGetUniqueId(&id);
        detail::mpi_check(MPI_Bcast(&id_status, 1, MPI_INT, 0, world.native()), "MPI_Bcast (NCCL id status)");
        if (id_status != ncclSuccess) {
            if (world.rank() == 0) detail::nccl_check(static_cast<ncclResult_t>(id_status), "ncclGetUniqueId");
            throw error("nccl::from_mpi: rank 0 could not create the NCCL id (ncclGetUniqueId failed: " +
                        std::string(ncclGetErrorString(static_cast<ncclResult_t>(id_status))) + ")");
        }
        detail::mpi_check(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, world.native()),
                          "MPI_Bcast (NCCL id)");
        auto state = std::make_shared<detail::nccl_state>(device, compute);
        detail::nccl_device_guard guard(device);
        detail::nccl_check(ncclCommInitRank(&state->comm, world.size(), id, world.rank()), "ncclCommInitRank");
        return nccl(std::move(state));
    }
#endif

    nccl(nccl&&) noexcept = default;
    nccl& operator=(nccl&&) noexcept = default;
    nccl(const nccl&) = delete;
    nccl& operator=(const nccl&) = delete;
    // Enqueues what is pending, waits for the communication stream (at most the timeout) and
    // destroys the NCCL communicator (aborts it, past the timeout or after an asynchronous
    // error), once this object and every request of it are gone.
    ~nccl() = default;

    [[nodiscard]] int rank() const { return rank_; }
    [[nodiscard]] int size() const { return size_; }
    [[nodiscard]] int device() const { return usable().device; }
    [[nodiscard]] ncclComm_t native() const { return usable().comm; }
    [[nodiscard]] cudaStream_t comm_stream() const { return usable().stream->get(); }
    [[nodiscard]] cudaStream_t compute_stream() const { return usable().compute; }
    // Later operations order after, and their wait() orders, `compute` instead (a stream
    // of this communicator's device; nullptr is the legacy default stream).
    void set_compute_stream(cudaStream_t compute) { usable().compute = compute; }

    // How long a host wait (synchronize(), barrier()) may take before the NCCL communicator
    // is aborted and timeout_error thrown; > 0, no_timeout waits forever. Stream-ordered
    // waits do not block the host and are not timed. split() passes it on.
    template <class Rep, class Period>
    void set_timeout(std::chrono::duration<Rep, Period> timeout) {
        usable().timeout = checked_timeout(timeout);
    }
    [[nodiscard]] timeout_duration timeout() const { return usable().timeout; }

    // Enqueues the pending sends and receives now (one NCCL group). Needed only before the
    // host blocks on something else that a peer can finish only after these started.
    void flush() { usable().flush(); }

    // Point to point on bytes of device memory. The tag must be in [0, max_tag] but does not
    // select anything: per peer, receives match sends in posting order (see the class note).
    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        auto& s = usable();
        detail::check_peer("dest", dest, size_);
        detail::check_tag(tag);
        detail::check_device_memory(data.data(), data.size(), "isend: data", s.device);
        // ncclSend only reads the buffer; its API just is not const.
        return post(true, const_cast<std::byte*>(data.data()), data.size(), dest, tag);  // NOLINT
    }

    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        auto& s = usable();
        detail::check_peer("source", source, size_);
        detail::check_tag(tag);
        detail::check_device_memory(buffer.data(), buffer.size(), "irecv: buffer", s.device);
        return post(false, buffer.data(), buffer.size(), source, tag);
    }

    // The collectives, blocking (allreduce_sum, allgather, reduce_scatter_sum: start, then
    // wait; blocking_collectives.hpp) or not: ncclAllReduce in place, whose summation order is
    // NCCL's (ring or tree), so unlike comm::local the result may differ from rank order in
    // the last bits; ncclAllGather, all[r*n, (r+1)*n) = rank r's `mine`, in place when mine is
    // that block; ncclReduceScatter, mine = the sum over ranks of their block rank() of `all`.
    // The buffers belong to the operation until wait() (the compute stream must not touch
    // them before) or synchronize(). Lengths are checked on this rank only: agreeing across
    // ranks, as weft::mpi does, would cost a host round trip per call.
    [[nodiscard]] request iallreduce_sum(std::span<float> values) { return start_allreduce(values, "allreduce_sum(float)"); }
    [[nodiscard]] request iallreduce_sum(std::span<double> values) { return start_allreduce(values, "allreduce_sum(double)"); }
    [[nodiscard]] request iallgather(std::span<const float> mine, std::span<float> all) {
        return start_allgather(mine, all, "allgather(float)");
    }
    [[nodiscard]] request iallgather(std::span<const double> mine, std::span<double> all) {
        return start_allgather(mine, all, "allgather(double)");
    }
    [[nodiscard]] request ireduce_scatter_sum(std::span<const float> all, std::span<float> mine) {
        return start_reduce_scatter(all, mine, "reduce_scatter_sum(float)");
    }
    [[nodiscard]] request ireduce_scatter_sum(std::span<const double> all, std::span<double> mine) {
        return start_reduce_scatter(all, mine, "reduce_scatter_sum(double)");
    }

    // ncclBroadcast in place, stream-ordered like the other blocking collectives (complete on
    // return for host memory, as they are).
    void broadcast(std::span<std::byte> data, int root) {
        auto& s = usable();
        detail::check_peer("root", root, size_);
        detail::nccl_device_guard guard(s.device);
        const detail::staged_buffer d(data.data(), data.size(), true, "broadcast: data", s.device, s.stream->get());
        start_staged("broadcast", d, d.staged(), [&](detail::nccl_state& st) {
            if (data.empty()) return;
            detail::nccl_check(ncclBroadcast(d.device(), d.device(), data.size(), ncclUint8, root, st.comm,
                                             st.stream->get()),
                               "ncclBroadcast");
        }).wait();
    }

    // A one-element allreduce the host waits for: no rank returns before every rank has
    // entered. It also drains this communicator's earlier operations.
    void barrier() {
        start("barrier", [](detail::nccl_state& st) {
            detail::nccl_check(ncclAllReduce(st.scratch->data(), st.scratch->data(), 1, ncclFloat32, ncclSum,
                                             st.comm, st.stream->get()),
                               "ncclAllReduce (barrier)");
        }).synchronize();
    }

    // ncclCommSplit, like MPI_Comm_split with color >= 0; collective and host-blocking. The
    // result runs on the same device with the same compute stream and its own comm stream.
    [[nodiscard]] nccl split(int color, int key) {
        auto& s = usable();
        require(color >= 0, "color", color, "must be >= 0 (every rank joins one group)");
        s.flush();
        auto state = std::make_shared<detail::nccl_state>(s.device, s.compute);
        detail::nccl_device_guard guard(s.device);
        s.drain("split()");  // the parent has no operation in flight while it is split
        detail::nccl_check(ncclCommSplit(s.comm, color, key, &state->comm, nullptr), "ncclCommSplit");
        state->timeout = s.timeout;
        return nccl(std::move(state));
    }

private:
    explicit nccl(std::shared_ptr<detail::nccl_state> state) : state_(std::move(state)) {
        detail::nccl_check(ncclCommUserRank(state_->comm, &state_->rank), "ncclCommUserRank");
        detail::nccl_check(ncclCommCount(state_->comm, &state_->size), "ncclCommCount");
        rank_ = state_->rank;
        size_ = state_->size;
    }

    detail::nccl_state& usable() const {
        if (!state_) throw error("use of a moved-from weft::comm::nccl");
        if (state_->comm == nullptr) throw error("weft::comm::nccl used after a communication timeout aborted it");
        return *state_;
    }

    request post(bool is_send, void* data, std::size_t bytes, int peer, int tag) {
        auto& s = usable();
        detail::nccl_device_guard guard(s.device);
        auto done = std::make_shared<detail::nccl_completion>();
        done->what = std::string(is_send ? "isend(dest=" : "irecv(source=") + std::to_string(peer) +
                     ", tag=" + std::to_string(tag) + ")";
        // The comm stream waits for the data now; the group itself is enqueued at flush().
        s.join_compute();
        s.pending.push_back({is_send, data, bytes, peer, tag, done});
        return request(state_, std::move(done));
    }

    // Enqueues one collective: pending sends/receives first (posting order), then comm
    // stream after compute stream, the NCCL call, and the completion event.
    template <class Launch>
    request start(std::string_view what, Launch&& launch) {
        auto& s = usable();
        s.flush();
        detail::nccl_device_guard guard(s.device);
        auto done = std::make_shared<detail::nccl_completion>();
        done->what = std::string(what);
        s.join_compute();
        std::forward<Launch>(launch)(s);
        done->done.record(s.stream->get());
        done->state = detail::nccl_completion::status::launched;
        return request(state_, std::move(done));
    }

    // The collective `launch` (on the buffers' device forms), ordered like start(). If a
    // buffer is host memory it went through a device copy, and then the call completes on the
    // host before it returns, the result copied back into `out`: host memory in, host memory
    // out, as the engine's scalar reductions expect.
    template <class Launch>
    request start_staged(std::string_view what, const detail::staged_buffer& out, bool staged, Launch&& launch) {
        request r = start(what, std::forward<Launch>(launch));
        if (staged) {
            auto& s = usable();
            detail::nccl_device_guard guard(s.device);
            // The collective first, under the timeout and the asynchronous-error checks: a copy
            // into pageable host memory returns only once it is done, so a copy enqueued behind
            // a collective that never ends (a dead peer) would hang the host inside CUDA.
            gpu::event collective;
            collective.record(s.stream->get());
            s.host_wait(collective.get(), std::string(what));
            out.copy_back(s.stream->get());
            gpu::event copied;
            copied.record(s.stream->get());
            s.host_wait(copied.get(), std::string(what) + " (staged through host memory)");
        }
        return r;
    }

    template <class T>
    request start_allreduce(std::span<T> values, std::string_view what) {
        auto& st = usable();
        detail::nccl_device_guard guard(st.device);
        const detail::staged_buffer v(values.data(), values.size_bytes(), true, std::string(what) + ": values",
                                      st.device, st.stream->get());
        return start_staged(what, v, v.staged(), [&](detail::nccl_state& s) {
            if (values.empty()) return;
            detail::nccl_check(ncclAllReduce(v.device(), v.device(), values.size(), detail::nccl_type<T>, ncclSum,
                                             s.comm, s.stream->get()),
                               "ncclAllReduce");
        });
    }

    template <class T>
    request start_allgather(std::span<const T> mine, std::span<T> all, std::string_view what) {
        check_blocks(what, all.data(), all.size(), mine.data(), mine.size());
        auto& st = usable();
        detail::nccl_device_guard guard(st.device);
        const detail::staged_buffer m(mine.data(), mine.size_bytes(), true, std::string(what) + ": mine", st.device,
                                      st.stream->get());
        const detail::staged_buffer a(all.data(), all.size_bytes(), false, std::string(what) + ": all", st.device,
                                      st.stream->get());
        return start_staged(what, a, m.staged() || a.staged(), [&](detail::nccl_state& s) {
            if (mine.empty()) return;
            detail::nccl_check(ncclAllGather(m.device(), a.device(), mine.size(), detail::nccl_type<T>, s.comm,
                                             s.stream->get()),
                               "ncclAllGather");
        });
    }

    template <class T>
    request start_reduce_scatter(std::span<const T> all, std::span<T> mine, std::string_view what) {
        check_blocks(what, all.data(), all.size(), mine.data(), mine.size());
        auto& st = usable();
        detail::nccl_device_guard guard(st.device);
        const detail::staged_buffer a(all.data(), all.size_bytes(), true, std::string(what) + ": all", st.device,
                                      st.stream->get());
        const detail::staged_buffer m(mine.data(), mine.size_bytes(), false, std::string(what) + ": mine", st.device,
                                      st.stream->get());
        return start_staged(what, m, m.staged() || a.staged(), [&](detail::nccl_state& s) {
            if (mine.empty()) return;
            detail::nccl_check(ncclReduceScatter(a.device(), m.device(), mine.size(), detail::nccl_type<T>, ncclSum,
                                                 s.comm, s.stream->get()),
                               "ncclReduceScatter");
        });
    }

    // The full buffer holds one block per rank; the block may alias the full buffer only as
    // its own block rank() (NCCL's in-place form), any other overlap is undefined in NCCL.
    // (Where each buffer lives is checked as it is staged.)
    template <class T>
    void check_blocks(std::string_view what, const T* all, std::size_t all_size, const T* mine,
                      std::size_t mine_size) const {
        const std::size_t expected = mine_size * static_cast<std::size_t>(size_);
        require(all_size == expected, std::string(what) + ": all.size()", all_size,
                "must be size() * mine.size() = " + std::to_string(size_) + " * " + std::to_string(mine_size) +
                    " = " + std::to_string(expected));
        if (mine_size == 0) return;
        const auto a = reinterpret_cast<std::uintptr_t>(all);
        const auto m = reinterpret_cast<std::uintptr_t>(mine);
        const bool overlap = m < a + all_size * sizeof(T) && a < m + mine_size * sizeof(T);
        const bool in_place = mine == all + static_cast<std::size_t>(rank_) * mine_size;
        if (overlap && !in_place) {
            throw error(std::string(what) + ": mine overlaps all but is not all's block rank() = " +
                        std::to_string(rank_) + "; pass disjoint buffers, or exactly that block for in place");
        }
    }

    std::shared_ptr<detail::nccl_state> state_;
    int rank_ = 0;
    int size_ = 0;
};

static_assert(communicator<nccl>);

}  // namespace weft::comm
