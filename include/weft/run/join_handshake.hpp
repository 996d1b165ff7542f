// What the ranks of a running elastic job tell the processes their `grow` started, and
// whether this process is one of those: the step, the running layout (which the joiners build
// their engines in, holding nothing) and the layout all of them go on in. A plain value
// broadcast from rank 0 of the grown world (run/elastic_session.hpp); no MPI here.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/sched/schedule_list.hpp"

namespace weft::run {

// A layout's fields as fixed-size values.
struct layout_fields {
    std::int32_t pp = 1, dp = 1, tp = 1, zero = 0, chunks = 1, microbatches = 1, world = 1;
    std::array<char, 32> schedule{};

    [[nodiscard]] static layout_fields of(const parallel_config& c) {
        layout_fields f{c.pp(), c.dp(), c.tp(), c.zero_stage(), c.chunks(), c.microbatches(), c.world_size(), {}};
        const std::string_view name = c.schedule().name();
        require(name.size() < f.schedule.size(), "schedule name", name, "must be shorter than 32 characters");
        std::copy(name.begin(), name.end(), f.schedule.begin());
        return f;
    }
    friend bool operator==(const layout_fields&, const layout_fields&) = default;
    [[nodiscard]] parallel_config config() const {
        return parallel_config({.pp = pp, .dp = dp, .tp = tp, .zero_stage = zero, .microbatches = microbatches,
                                .chunks = chunks, .schedule = sched::parse_schedule_kind(schedule.data()),
                                .world_size = world});
    }
};

struct join_handshake {
    // The step of a handshake that says the run ended before the joiners were taken in: they
    // leave (exit 0).
    static constexpr std::int64_t run_ended = -1;

    std::int64_t step = 0;                // the boundary the joiners arrive at (or run_ended)
    layout_fields running;                // the layout the old ranks train in
    std::int32_t partition_count = 0;     // its partition (unit counts per stage; 0: the default)
    std::array<std::int32_t, 256> partition{};
    layout_fields next;                   // the layout every rank goes on in (default partition)

    [[nodiscard]] std::vector<int> running_partition() const {
        return {partition.begin(), partition.begin() + partition_count};
    }
    void set_running_partition(const std::vector<int>& units) {
        require(units.size() <= partition.size(), "partition stages", units.size(),
                "must be at most " + std::to_string(partition.size()) + " for a grow");
        partition_count = static_cast<std::int32_t>(units.size());
        std::copy(units.begin(), units.end(), partition.begin());
    }
};

namespace detail {
inline std::atomic<bool> joined_running_world{false};
// Set where a join's start was given up while its thread waits inside MPI for good (an accept
// nobody connected to): the launch then bounds MPI_Finalize, which might wait for it.
inline std::atomic<bool> finalize_may_wait{false};
// The program's command line as run::launch got it, before MPI_Init: what a grow starts the
// new processes with.
inline std::vector<std::string>& launch_arguments() {
    static std::vector<std::string> arguments;
    return arguments;
}
}  // namespace detail

// Whether this process was started by a running elastic job's grow (the launch sets it).
[[nodiscard]] inline bool joined_running_world() { return detail::joined_running_world.load(); }

}  // namespace weft::run
