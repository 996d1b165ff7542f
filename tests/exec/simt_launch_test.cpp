// The host emulation's launch (weft/exec/cuda/simt_emulation.hpp) when device code throws on
// one of a block's threads, as the emulation's own checks do (a warp-wide instruction in a
// partial warp, cp.async's source size): the exception reaches launch's caller, the block's
// other threads finish without waiting for the one that threw, no later block starts, and
// the next launch runs as if nothing had happened. Without this a test program ended in
// std::terminate at its first such error. No GPU and no CUDA toolkit needed.
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "weft/exec/cuda/simt_emulation.hpp"

namespace {

namespace simt = weft::exec::cuda_detail::simt;

constexpr int block_threads = 64;  // two warps
constexpr int grid_blocks = 3;

}  // namespace

TEST_CASE("simt emulation: a throw on a block's thread reaches launch's caller, the block finishes without it",
          "[exec][simt]") {
    std::array<std::atomic<int>, grid_blocks> finished{};  // threads that ran each block to its end
    auto kernel = [&] {
        if (blockIdx.x == 1 && threadIdx.x == 5) throw std::runtime_error("planted in block 1, thread 5");
        __syncwarp();     // thread 5's warp-mates pass their warp's barrier without it
        __syncthreads();  // and every thread the block's
        __syncwarp();
        finished[blockIdx.x].fetch_add(1);
    };
    REQUIRE_THROWS_WITH(simt::launch({grid_blocks, 1, 1}, block_threads, 0, kernel), "planted in block 1, thread 5");
    CHECK(finished[0].load() == block_threads);
    CHECK(finished[1].load() == block_threads - 1);
    CHECK(finished[2].load() == 0);  // no block starts after the one that failed

    // The next launch is whole again: every thread of every block, with barriers.
    std::atomic<int> ran{0};
    simt::launch({grid_blocks, 1, 1}, block_threads, 0, [&] {
        __syncwarp();
        __syncthreads();
        ran.fetch_add(1);
    });
    CHECK(ran.load() == grid_blocks * block_threads);
}

TEST_CASE("simt emulation: a warp-wide instruction in a partial warp is refused by name, not a hang or an abort",
          "[exec][simt]") {
    // 40 threads: the second warp has 8 lanes, and a full-mask __syncwarp there is undefined.
    REQUIRE_THROWS_WITH(simt::launch({2, 1, 1}, 40, 0, [] { __syncwarp(); }),
                        Catch::Contains("warp-wide instruction's warp") && Catch::Contains("must have 32 lanes"));
}

TEST_CASE("simt emulation: a host thread that fails to start ends the launch with its error, not a hang",
          "[exec][simt]") {
    // std::jthread's constructor throws std::system_error when the system has no thread to
    // give; unhandled, the threads already started would wait at the block's first barrier for
    // the rest forever. Fail the start of thread 0, a thread mid-warp (40: warp 1 has 8 lanes
    // running) and the last.
    for (const int fails_at : {0, 40, block_threads - 1}) {
        INFO("the start of thread " << fails_at << " fails");
        int started = 0;
        auto start_until_failure = [&](std::vector<std::jthread>& running, auto&& body) {
            if (started == fails_at)
                throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                        "planted thread start failure");
            ++started;
            simt::detail::start_host_thread{}(running, std::forward<decltype(body)>(body));
        };
        std::atomic<int> ran{0};
        auto count_threads = [&] { ran.fetch_add(1); };
        REQUIRE_THROWS_WITH(
            simt::detail::launch_with(start_until_failure, {grid_blocks, 1, 1}, {block_threads, 1, 1}, 0, count_threads),
            Catch::Contains("planted thread start failure"));
        CHECK(started == fails_at);
        CHECK(ran.load() == 0);  // no block runs short of threads
    }
    std::atomic<int> ran{0};
    simt::launch({grid_blocks, 1, 1}, block_threads, 0, [&] {
        __syncthreads();
        ran.fetch_add(1);
    });
    CHECK(ran.load() == grid_blocks * block_threads);
}
