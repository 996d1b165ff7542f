// Measures the CPU backend's own single-thread GEMM rate, the practical peak that MFU on
// a CPU is measured against (there is no vendor table for "this core with this compiler
// and this Eigen"): repeated square float GEMMs, best of several timed rounds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>

#include "weft/core/error.hpp"
#include "weft/exec/cpu.hpp"

namespace weft::exec {

// GFLOP/s of one thread on `size` x `size` x `size` float GEMMs: the best of `rounds` timed
// rounds after an untimed one, which faults the pages in and warms the caches. A round
// repeats the product until it has run `min_round_seconds`: a single product of the old
// default size (256, about 0.5 ms) was shorter than one preemption, which could halve the
// figure and put MFU above 100%.
[[nodiscard]] inline double measure_cpu_gemm_gflops(int size = 384, int rounds = 5, double min_round_seconds = 0.02) {
    require(size >= 1, "measure_cpu_gemm_gflops: size", size, "must be at least 1");
    require(rounds >= 1, "measure_cpu_gemm_gflops: rounds", rounds, "must be at least 1");
    require(std::isfinite(min_round_seconds) && min_round_seconds >= 0 && min_round_seconds <= 10,
            "measure_cpu_gemm_gflops: min_round_seconds", min_round_seconds, "must be between 0 and 10");
    using matrix = cpu::matrix;
    using clock = std::chrono::steady_clock;
    const matrix a = matrix::Random(size, size);
    const matrix b = matrix::Random(size, size);
    matrix c(size, size);
    [[maybe_unused]] volatile float observed = 0;
    c.noalias() = a * b;  // the untimed round
    observed = c(0, 0);
    const double flops = 2.0 * size * size * size;
    double best = 0;
    for (int round = 0; round < rounds; ++round) {
        const auto start = clock::now();
        double seconds = 0;
        long products = 0;
        do {
            c.noalias() = a * b;
            // A volatile store of each product's result, so the compiler cannot drop one as
            // unused.
            observed = c(0, 0);
            ++products;
            seconds = std::chrono::duration<double>(clock::now() - start).count();
        } while (seconds < min_round_seconds);
        if (seconds > 0) best = std::max(best, flops * static_cast<double>(products) / seconds / 1e9);
    }
    return best;
}

}  // namespace weft::exec
