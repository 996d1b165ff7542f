// A hook the CPU kernels call on their calling thread as each one starts, so that whoever owns
// messages in flight can move them on during compute: the pipeline loop sets it to its
// communicators' progress() for the length of a step (train/program_loop.hpp). Per thread: the
// ranks of an in-process run are threads, each with its own loop, and the pool's workers never
// call it (MPI is called from the rank's own thread only).
#pragma once

#include <functional>

namespace weft::exec {

namespace detail {
inline thread_local const std::function<void()>* kernel_progress_hook = nullptr;
}  // namespace detail

// Calls the hook set on this thread, if any.
inline void drive_kernel_progress() {
    if (const auto* hook = detail::kernel_progress_hook) (*hook)();
}

// Sets `hook` on this thread while it lives (nested scopes restore the one before).
class kernel_progress_scope {
public:
    explicit kernel_progress_scope(const std::function<void()>& hook) : previous_(detail::kernel_progress_hook) {
        detail::kernel_progress_hook = &hook;
    }
    kernel_progress_scope(const kernel_progress_scope&) = delete;
    kernel_progress_scope& operator=(const kernel_progress_scope&) = delete;
    ~kernel_progress_scope() { detail::kernel_progress_hook = previous_; }

private:
    const std::function<void()>* previous_;
};

}  // namespace weft::exec
