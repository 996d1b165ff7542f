// How long the host may wait for a GPU's queued work before it gives up with
// weft::comm::timeout_error, instead of blocking in cudaStreamSynchronize for ever.
//
// Why: over comm::nccl the compute stream waits, on the device, for the communication the
// program loop waited for (request.wait() orders the stream, it does not block the host).
// A peer that never sends leaves that receive unfinished and the compute stream stopped
// behind it, so the next host wait for the stream (the end of a step, a copy to the host,
// reading a loss) would never return: the communicator's own timeout only covers the waits
// it makes itself. With a limit, that wait first aborts every communicator registered for
// its GPU (weft/comm/abort_on_timeout.hpp), which ends the kernels waiting for peers so that
// the GPU's streams drain and the shutdown does not hang, and then throws the same error a
// communicator's wait gives, naming the rank. The engine sets the limit to its
// communicator's timeout (train/layout_engine.hpp); without one set, waits are unlimited
// and as fast as CUDA's own.
//
// The limit covers all the work queued before the wait, not only communication: the host
// runs ahead of the GPU, so a timeout shorter than a step's compute would end a healthy run.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>

#include "weft/comm/abort_on_timeout.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/core/poll_until.hpp"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

struct wait_limit {
    comm::timeout_duration limit = comm::no_timeout;
    int rank = 0;    // the rank the error names (in the world the engine runs over)
    int device = 0;  // the GPU whose communicators a timeout aborts
};

namespace detail {
inline thread_local wait_limit limit_of_thread{};
}  // namespace detail

// The limit of the backend this thread computes with (exec::cuda::set_wait_limit sets both):
// for the waits that no backend object is handed to, as the training state's pool waiting
// for a freed buffer's work (managed_state_memory.hpp), which runs on the rank's thread.
// It stays until set again; a thread that set none waits without a limit.
[[nodiscard]] inline const wait_limit& thread_wait_limit() { return detail::limit_of_thread; }
inline void set_thread_wait_limit(const wait_limit& limit) { detail::limit_of_thread = limit; }

namespace detail {

// Waits for `query` (cudaStreamQuery or cudaEventQuery, bound to its handle) to report the
// work done (without a limit: however long that takes); an error it reports is a weft::error
// naming `what`; past the limit, a timeout_error naming `what` and the rank.
template <class Query>
void wait_for_device(const wait_limit& limit, Query&& query, const std::string& what) {
    const auto start = comm::timeout_clock::now();
    const bool done = poll_until(
        [&] {
            const cudaError_t status = query();
            if (status == cudaErrorNotReady) return false;
            gpu::check(status, what);
            return true;
        },
        comm::deadline_after(limit.limit));
    if (done) return;
    comm::abort_on_timeout::registry().abort_all(limit.device);
    throw comm::timeout_error(
        {.rank = limit.rank,
         .operation = what + " (the GPU's queued work did not finish: it waits for communication that has not come, "
                             "or the limit is shorter than that work)",
         .peers = {},
         .waited_seconds = std::chrono::duration<double>(comm::timeout_clock::now() - start).count(),
         .timeout_seconds = comm::timeout_seconds(limit.limit), .action = {}});
}

}  // namespace detail

// Waits for everything queued on `stream`, within the limit.
inline void synchronize(cudaStream_t stream, const wait_limit& limit, const std::string& what) {
    if (limit.limit == comm::no_timeout) {
        gpu::check(cudaStreamSynchronize(stream), what);
        return;
    }
    detail::wait_for_device(limit, [stream] { return cudaStreamQuery(stream); }, what);
}

// Waits for the work before `event` was recorded, within the limit.
inline void synchronize(cudaEvent_t event, const wait_limit& limit, const std::string& what) {
    if (limit.limit == comm::no_timeout) {
        gpu::check(cudaEventSynchronize(event), what);
        return;
    }
    detail::wait_for_device(limit, [event] { return cudaEventQuery(event); }, what);
}

}  // namespace weft::exec::cuda_detail
