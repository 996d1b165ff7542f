// weft::exec::cuda_detail::interval_clock, which times the compute actions for the step log's bubble on a
// GPU: it counts the time the stream spends between begin() and end(), not the host's time
// queuing the work, and not the stream's time between intervals. The stream is held by host
// functions that sleep, so the intervals have known lengths without a kernel. Its misuse
// (an end without a begin, two begins) throws without a GPU. Exit 77 without a GPU.
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <thread>

#include "device_check.hpp"
#include "weft/core/error.hpp"
#include "weft/exec/cuda/interval_clock.hpp"
#include "weft/gpu/stream.hpp"

namespace {

using weft_test::expect;

constexpr int short_ms = 50, long_ms = 200;

// Queues a host function that sleeps `ms` milliseconds: the stream is busy for that long.
// `ms` is one of the constants above, which outlive the function's run.
void occupy(cudaStream_t stream, const int& ms) {
    weft::gpu::check(
        cudaLaunchHostFunc(
            stream,
            [](void* d) { std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<const int*>(d))); },
            const_cast<int*>(&ms)),
        "cudaLaunchHostFunc (occupying the stream)");
}

template <class F>
bool throws_naming(F&& f, const std::string& words) {
    try {
        f();
    } catch (const weft::error& e) {
        return std::string(e.what()).find(words) != std::string::npos;
    }
    return false;
}

void test_misuse_is_refused() {
    // No event is made before the checks, so this runs without a GPU.
    weft::exec::cuda_detail::interval_clock clock(nullptr);
    expect(throws_naming([&] { clock.end(); }, "no interval was begun"), "end() without begin() is refused");
    expect(clock.intervals() == 0, "no interval after a refused end()");
}

void test_device_time_not_host_time() {
    weft::gpu::stream stream;
    weft::exec::cuda_detail::interval_clock clock(stream.get());
    expect(clock.take_seconds() == 0.0, "no interval: zero seconds");

    // One interval with 200 ms of work: the host queues it in far less, the stream takes 200.
    const auto queued_from = std::chrono::steady_clock::now();
    clock.begin();
    occupy(stream.get(), long_ms);
    clock.end();
    const double queuing = std::chrono::duration<double>(std::chrono::steady_clock::now() - queued_from).count();
    expect(queuing < 0.15, "queuing the interval returned before its work ran (" + std::to_string(queuing) + " s)");
    expect(throws_naming([&] { clock.end(); }, "no interval was begun"), "a second end() is refused");
    const double one = clock.take_seconds();
    expect(one >= 0.19 && one < 1.0, "one interval of 200 ms measured " + std::to_string(one) + " s");
    expect(clock.intervals() == 0, "take_seconds() starts over");

    // Two intervals of 50 ms with 200 ms of other work between them: 100 ms, not 300.
    clock.begin();
    occupy(stream.get(), short_ms);
    clock.end();
    occupy(stream.get(), long_ms);  // between intervals: communication, an optimizer step, idling
    clock.begin();
    expect(throws_naming([&] { clock.begin(); }, "has not ended"), "a begin() inside an interval is refused");
    expect(throws_naming([&] { static_cast<void>(clock.take_seconds()); }, "still open"),
           "take_seconds() with an interval open is refused");
    occupy(stream.get(), short_ms);
    clock.end();
    expect(clock.intervals() == 2, "two intervals marked");
    const double two = clock.take_seconds();
    expect(two >= 0.095 && two < 0.28, "two intervals of 50 ms apart measured " + std::to_string(two) + " s");

    // discard() after a failure: the marks are forgotten and the clock works on.
    clock.begin();
    occupy(stream.get(), short_ms);
    clock.discard();
    expect(clock.intervals() == 0 && clock.take_seconds() == 0.0, "discard() forgets the marks");
    clock.begin();
    occupy(stream.get(), short_ms);
    clock.end();
    const double after = clock.take_seconds();
    expect(after >= 0.045 && after < 0.5, "an interval after discard() measured " + std::to_string(after) + " s");
    stream.synchronize();
}

}  // namespace

int main(int argc, char** argv) {
    return weft_test::run_device_test(argc, argv, {"clock"}, test_misuse_is_refused,
                                      [](std::string_view) { test_device_time_not_host_time(); });
}
