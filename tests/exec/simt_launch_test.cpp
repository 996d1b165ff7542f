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

#include "weft/exec/cuda/simt_emulation.hpp"

namespace {

namespace simt = weft::cuda::simt;

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
