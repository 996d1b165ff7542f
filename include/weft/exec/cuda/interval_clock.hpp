// Time spent on a stream between marks: what the step log's bubble needs of a GPU.
//
// The bubble is a rank's idle share of its program: 1 - (time in F, B, I and W) / (wall time).
// On the CPU an action's work is done when it returns, so host time around it is its time. On a
// GPU the action queues kernels and returns: host time around it is launch time, and the
// bubble of GPT-2 124M at pp=1 on one H200 read 88 % where the GPU never waited. So the
// backend times its actions where they run: begin() and end() record events on the stream,
// and take_seconds() sums the closed intervals once the program has queued them all (one
// wait, at the end, rather than one per action).
//
// Time between an end() and the next begin() is not counted: the stream idles there, or
// runs work outside the actions (communication, the optimizer), which is what a bubble is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/wait_limit.hpp"
#include "weft/gpu/stream.hpp"

namespace weft::exec::cuda_detail {

class interval_clock {
public:
    explicit interval_clock(cudaStream_t stream) : stream_(stream) {}

    // Opens an interval at this point of the stream's queue.
    void begin() {
        if (open_) throw error("interval_clock::begin: the interval begun before has not ended");
        // Events are reused from program to program. Each vector grows on its own: a failed
        // cudaEventCreate must not leave one shorter than the other.
        if (used_ == starts_.size()) starts_.emplace_back();
        if (used_ == ends_.size()) ends_.emplace_back();
        starts_[used_].record(stream_);
        open_ = true;
    }
    // Closes it: the interval holds the work queued on the stream in between.
    void end() {
        if (!open_) throw error("interval_clock::end: no interval was begun");
        ends_[used_].record(stream_);
        ++used_;
        open_ = false;
    }
    // Seconds in the intervals closed since the last take_seconds() or discard(), once the
    // stream has run them (a wait for the last end, within `limit`); starts over.
    [[nodiscard]] double take_seconds(const wait_limit& limit = {}) {
        if (open_) throw error("interval_clock::take_seconds: an interval is still open");
        double seconds = 0;
        if (used_ > 0) {
            synchronize(ends_[used_ - 1].get(), limit, "a wait for the end of the timed compute actions");
            for (std::size_t i = 0; i < used_; ++i) seconds += 1e-3 * double(ends_[i].elapsed_ms_since(starts_[i]));
        }
        used_ = 0;
        return seconds;
    }
    // Forgets what was marked (a program that threw part-way): the next begin() starts over.
    void discard() {
        used_ = 0;
        open_ = false;
    }
    // Intervals closed and not yet taken.
    [[nodiscard]] std::size_t intervals() const { return used_; }

private:
    cudaStream_t stream_;
    std::vector<gpu::event> starts_, ends_;
    std::size_t used_ = 0;
    bool open_ = false;
};

}  // namespace weft::exec::cuda_detail
