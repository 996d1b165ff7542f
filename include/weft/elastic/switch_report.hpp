// What a layout switch did, as engine.reconfigure() returns it on every rank: the layouts,
// the bytes the plan moved against the lower bound, the time and bandwidth, and the memory
// the busiest rank held (staging, and state plus staging against max(old, new) + 2 x cap).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace weft::elastic {

struct switch_report {
    std::string from;                      // layout::describe() of the layout left
    std::string to;                        // and of the new one
    std::size_t bytes_moved = 0;           // sent between ranks, all ranks together
    std::size_t lower_bound_bytes = 0;     // what no plan can avoid sending
    std::size_t bytes_copied_locally = 0;  // all ranks together
    double seconds = 0;                    // the slowest rank's, validation to new engine
    // The slowest rank's time in each phase: checking the layout and agreeing on it, planning,
    // moving the state, and building the new layout's engine.
    double check_seconds = 0;
    double plan_seconds = 0;
    double move_seconds = 0;
    double build_seconds = 0;
    std::size_t staging_peak_bytes = 0;  // the most any rank's staging buffers held
    std::size_t staging_cap_bytes = 0;   // the cap asked for
    std::size_t memory_peak_bytes = 0;   // the most state plus staging any rank held
    std::size_t memory_bound_bytes = 0;  // that rank's max(old state, new state) + 2 x cap
    bool within_memory_bound = true;     // every rank held at most its own bound
    // New state buffers made ahead of the move, all ranks together (a grow's joiners make theirs
    // during their start: engine::prepare_layout).
    std::size_t bytes_made_ahead = 0;

    [[nodiscard]] double gigabytes_per_second() const { return seconds > 0 ? bytes_moved / seconds / 1e9 : 0.0; }

    // "from <layout> | to <layout> | moved X MiB (lower bound Y MiB) | T ms | G GB/s |
    // staging peak P MiB", the figures train_gpt prints for each switch.
    [[nodiscard]] std::string summary() const {
        char figures[256];
        std::snprintf(figures, sizeof figures,
                      "moved %.1f MiB (lower bound %.1f MiB) | %.1f ms | %.2f GB/s | staging peak %.1f MiB",
                      mib(bytes_moved), mib(lower_bound_bytes), 1e3 * seconds, gigabytes_per_second(),
                      mib(staging_peak_bytes));
        return "from " + from + " | to " + to + " | " + figures;
    }

    static double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
};

}  // namespace weft::elastic
