// The memory report at the end of a run: one line with the most any rank holds (training
// state between steps, its in-step peak, and activations), from the engine's memory report
// (docs/parallelism.md has the formulas).
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
    double most[5] = {double(m.between_steps.parameters), double(m.between_steps.gradients),
                      double(m.between_steps.optimizer_state), double(m.peak.total()), double(m.peak_activations)};
    std::vector<double> all(5 * static_cast<std::size_t>(world.size()));
    world.allgather(std::span<const double>(most), std::span<double>(all));
    for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r)
        for (std::size_t i = 0; i < 5; ++i) most[i] = std::max(most[i], all[5 * r + i]);
    if (world.rank() == 0)
        std::printf("memory per rank (most of any rank) | params %.2f MiB | grads %.2f MiB | optimizer %.2f MiB | "
                    "state peak in step %.2f MiB | activations peak %.2f MiB\n",
                    most[0] / 1048576, most[1] / 1048576, most[2] / 1048576, most[3] / 1048576, most[4] / 1048576);
}

}  // namespace weft::run
