// How the program loop times a rank's compute actions (F, B, I, W) for the step log's bubble,
// on any backend.
//
// A backend whose actions finish before they return (exec::cpu) is timed on the host, around
// each action. A backend that queues its work and returns (exec::cuda) would be timed by its
// launches, so it times them where they run: it models device_timed, the loop marks each
// action's start and end on it, and takes the sum once the program is queued
// (weft/exec/cuda/interval_clock.hpp).
#pragma once

#include <concepts>

namespace weft::exec {

template <class Backend>
concept device_timed = requires(Backend& b) {
    b.begin_compute_interval();
    b.end_compute_interval();
    { b.take_compute_seconds() } -> std::convertible_to<double>;  // waits for the last interval
    b.discard_compute_intervals();                                // after a program that threw
};

}  // namespace weft::exec
