// What weft's CUDA test programs share: checks that count, report and go on (so one run
// shows every failure), exact or within a tolerance, and a main that runs the host-side checks first, skips with
// exit code 77 where there is no GPU (ctest's SKIP_RETURN_CODE), then the chosen parts; and
// a hold of a stream, for checks of what waits for it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "weft/gpu/runtime.hpp"

namespace weft_test {

inline int failures = 0;
inline int checks = 0;

inline void expect(bool condition, const std::string& what) {
    ++checks;
    if (!condition) {
        std::fprintf(stderr, "FAILED: %s\n", what.c_str());
        ++failures;
    }
}

// |got - want| <= atol + rtol |want| everywhere (a NaN fails); reports the worst element.
inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                         double rtol, double atol) {
    ++checks;
    if (got.size() != want.size()) {
        std::fprintf(stderr, "FAILED: %s: size %zu, want %zu\n", what.c_str(), got.size(), want.size());
        ++failures;
        return;
    }
    std::size_t worst = 0;
    double worst_excess = -1;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - double(want[i]));
        const double excess = std::isnan(err) ? 1e30 : err - (atol + rtol * std::fabs(double(want[i])));
        if (excess > worst_excess) worst_excess = excess, worst = i;
    }
    if (worst_excess > 0) {
        std::fprintf(stderr, "FAILED: %s: element %zu is %.8g, want %.8g (rtol %g, atol %g)\n", what.c_str(), worst,
                     double(got[worst]), double(want[worst]), rtol, atol);
        ++failures;
    }
}

inline float max_abs(const std::vector<float>& values) {
    float m = 0;
    for (const float v : values) m = std::max(m, std::fabs(v));
    return m;
}

template <class T>
bool bits_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// `program [part]`: part is one of `parts` or "all" (the default). host_checks() needs no
// GPU and runs first; device_part(part) then runs each chosen part. Returns the exit code.
template <class HostChecks, class DevicePart>
int run_device_test(int argc, char** argv, std::initializer_list<std::string_view> parts, HostChecks&& host_checks,
                    DevicePart&& device_part) {
    const std::string_view chosen = argc > 1 ? argv[1] : "all";
    bool known = chosen == "all";
    std::string usage;
    for (const std::string_view part : parts) {
        known = known || chosen == part;
        usage += std::string(part) + "|";
    }
    if (!known) {
        std::fprintf(stderr, "usage: %s [%sall]\n", argv[0], usage.c_str());
        return 2;
    }
    try {
        host_checks();
        if (failures > 0) return 1;
        if (weft::gpu::device_count() == 0) {
            std::printf("no CUDA device: %d host-side check(s) passed, GPU checks skipped\n", checks);
            return 77;
        }
        std::printf("device 0: %s\n", weft::gpu::device_name(0).c_str());
        for (const std::string_view part : parts)
            if (chosen == "all" || chosen == part) device_part(part);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "FAILED with an exception: %s\n", e.what());
        return 1;
    }
    std::printf("%d check(s), %d failure(s)\n", checks, failures);
    return failures == 0 ? 0 : 1;
}

// Holds `stream` with a host function until `released` is set or 10 s pass: work queued on
// it afterwards is surely unfinished until then, as work behind a receive whose peer never
// sends would be. The cap turns a check that waits for the hold into a failure, not a hang.
inline void hold_stream(cudaStream_t stream, std::atomic<bool>& released) {
    weft::gpu::check(cudaLaunchHostFunc(
                          stream,
                          [](void* flag) {
                              const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                              while (!static_cast<std::atomic<bool>*>(flag)->load() &&
                                     std::chrono::steady_clock::now() < until)
                                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                          },
                          &released),
                      "cudaLaunchHostFunc (holding a stream)");
}

}  // namespace weft_test
