// Measures the CPU backend's own single-thread GEMM rate, the practical peak that MFU on
// a CPU is measured against (there is no vendor table for "this core with this compiler
// and this Eigen"): repeated square float GEMMs, best of several timed rounds.
#pragma once

#include <algorithm>
#include <chrono>

#include "weft/core/error.hpp"
#include "weft/exec/cpu.hpp"

namespace weft::exec {

// GFLOP/s of one thread on `size` x `size` x `size` float GEMMs (best of `rounds`).
[[nodiscard]] inline double measure_cpu_gemm_gflops(int size = 256, int rounds = 5) {
    require(size >= 1, "measure_cpu_gemm_gflops: size", size, "must be at least 1");
    require(rounds >= 1, "measure_cpu_gemm_gflops: rounds", rounds, "must be at least 1");
    using matrix = cpu::matrix;
    const matrix a = matrix::Random(size, size);
    const matrix b = matrix::Random(size, size);
    matrix c(size, size);
    [[maybe_unused]] volatile float observed = 0;
    double best = 0;
    for (int round = 0; round < rounds; ++round) {
        const auto start = std::chrono::steady_clock::now();
        c.noalias() = a * b;
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (seconds > 0) best = std::max(best, 2.0 * size * size * size / seconds / 1e9);
        // A volatile store of each round's result, so the compiler cannot drop a product as
        // unused.
        observed = c(0, 0);
    }
    return best;
}

}  // namespace weft::exec
