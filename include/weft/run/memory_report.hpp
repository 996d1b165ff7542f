// The memory report at the end of a run: one line with the most any rank holds (training
// state between steps, its in-step peak, and activations), from the engine's memory report
// (docs/parallelism.md has the formulas), and what its data-parallel collectives sent in the
// last step (the ring model of shard/collective_traffic.hpp).
#pragma once

#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/train/engine_options.hpp"

namespace weft::run {

// Collective over `world` (host values: the host side of a device communicator).
template <communicator Comm, class Engine>
void report_memory(Comm& world, const Engine& engine) {
    const auto m = engine.is_spare() ? train::memory_report{} : engine.memory();  // a spare holds nothing
    constexpr std::size_t n = 7;
    double most[n] = {double(m.between_steps.parameters), double(m.between_steps.gradients),
                      double(m.between_steps.optimizer_state), double(m.peak.total()), double(m.peak_activations),
                      m.traffic.gathered_bytes, m.traffic.reduced_bytes};
    std::vector<double> all(n * static_cast<std::size_t>(world.size()));
    world.allgather(std::span<const double>(most), std::span<double>(all));
    for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r)
        for (std::size_t i = 0; i < n; ++i) most[i] = std::max(most[i], all[n * r + i]);
    if (world.rank() == 0) {
        std::printf("memory per rank (most of any rank) | params %.2f MiB | grads %.2f MiB | optimizer %.2f MiB | "
                    "state peak in step %.2f MiB | activations peak %.2f MiB\n",
                    most[0] / 1048576, most[1] / 1048576, most[2] / 1048576, most[3] / 1048576, most[4] / 1048576);
        std::printf("data-parallel traffic per rank, last step (ring model, most of any rank) | gathers %.2f MiB | "
                    "reductions %.2f MiB\n",
                    most[5] / 1048576, most[6] / 1048576);
    }
}

}  // namespace weft::run
