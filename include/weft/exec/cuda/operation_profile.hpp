// The GPU time of each kernel and GEMM that exec::cuda queues, summed by operation over an
// eager run: `train_gpt --kernel-profile`. Bench figures at a model's shapes left a third of
// GPT-2 124M's step unexplained on an H200 (docs/cuda-figures.md); this times the step itself.
//
// Where the launch layer (backend_kernels.cu) and the GEMMs (gemm.hpp) queue work, a
// profile_scope records an event on the stream before and after it; take() waits for the
// events and sums the intervals by name. Off by default, when a scope costs one atomic load.
// A scope records nothing on a capturing stream (an event recorded there is a graph node,
// not a time) and is not reached in a graph's shadow, which queues nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/exec/cuda/wait_limit.hpp"
#include "weft/exec/operation_times.hpp"
#include "weft/gpu/stream.hpp"

namespace weft::exec::cuda_detail {

class operation_profile {
public:
    // The process's one profile: every thread's and backend's operations, as they share the
    // GPU's time (rank threads on one GPU are all in it).
    [[nodiscard]] static operation_profile& process() {
        static operation_profile profile;
        return profile;
    }

    void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
    [[nodiscard]] bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

    // The intervals recorded since the last take() or discard(), summed by name once the GPU
    // has run them (a wait for each, within `limit`); starts over.
    [[nodiscard]] std::vector<operation_time> take(const wait_limit& limit = {}) {
        std::vector<interval> taken;
        {
            const std::lock_guard lock(mutex_);
            taken.swap(intervals_);
        }
        std::vector<operation_time> times;
        for (const interval& i : taken) {
            synchronize(i.end.get(), limit, "a wait for a profiled operation (" + i.name + ")");
            add_operation_time(times, i.name, 1, double(i.end.elapsed_ms_since(i.start)));
        }
        return times;
    }
    void discard() {
        const std::lock_guard lock(mutex_);
        intervals_.clear();
    }

private:
    friend class profile_scope;
    struct interval {
        std::string name;
        gpu::event start, end;
    };
    void add(interval i) {
        const std::lock_guard lock(mutex_);
        intervals_.push_back(std::move(i));
    }

    std::atomic<bool> enabled_{false};
    std::mutex mutex_;
    std::vector<interval> intervals_;
};

// Times the work queued on `stream` during its lifetime as operation `name`, when the
// process's profile is on and the stream is not capturing.
class profile_scope {
public:
    profile_scope(std::string_view name, cudaStream_t stream) : stream_(stream) {
        if (!operation_profile::process().enabled()) return;
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) return;
        open_.emplace(operation_profile::interval{std::string(name), gpu::event(), gpu::event()});
        open_->start.record(stream);
    }
    profile_scope(const profile_scope&) = delete;
    profile_scope& operator=(const profile_scope&) = delete;
    // The operation queued nothing after all (a GEMM cuBLASLt refused at its call): no
    // interval, so the profile counts no call of ~0 ms under its name.
    void cancel() { open_.reset(); }
    // A failed record loses this interval only: profiling must not end the run.
    ~profile_scope() {
        if (!open_) return;
        try {
            open_->end.record(stream_);
            operation_profile::process().add(std::move(*open_));
        } catch (...) {  // NOLINT(bugprone-empty-catch): see above
        }
    }

private:
    cudaStream_t stream_;
    std::optional<operation_profile::interval> open_;
};

}  // namespace weft::exec::cuda_detail
