// How many threads a rank's CPU kernels run on (--threads): the user's number, or by default the
// cores this process may use shared out among the ranks of its machine, at least 1.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include "weft/comm/local.hpp"
#include "weft/core/error.hpp"
#include "weft/exec/cpu_thread_pool.hpp"
#if WEFT_HAS_MPI
#include "weft/comm/mpi.hpp"
#endif

namespace weft::run {

// The cores this process may run on (its affinity mask), or the machine's where that is unknown.
[[nodiscard]] inline int usable_cores() {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// How many ranks share this machine, as the launcher tells it (Open MPI, MPICH and Intel MPI).
[[nodiscard]] inline std::optional<int> launcher_local_size() {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
        if (const char* value = std::getenv(name); value != nullptr && std::atoi(value) > 0) return std::atoi(value);
    return std::nullopt;
}

// The ranks that share this rank's machine: ranks as threads all share one process; MPI ranks
// as the launcher says, or else (collective over this process's MPI_COMM_WORLD) the group
// MPI_Comm_split_type finds.
template <class World>
[[nodiscard]] int ranks_sharing_machine(World& world) {
#if WEFT_HAS_MPI
    if constexpr (std::is_same_v<World, comm::mpi>) {
        if (const auto told = launcher_local_size()) return *told;
        MPI_Comm node = MPI_COMM_NULL;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        int size = 1;
        if (node != MPI_COMM_NULL) {
            MPI_Comm_size(node, &size);
            MPI_Comm_free(&node);
        }
        return size;
    }
#endif
    return world.size();
}

// The default --threads. A launcher that bound this rank to fewer cores than the machine has
// (Open MPI binds each of up to 2 ranks to a core) gave it those cores alone: all of them.
// Otherwise the ranks of the machine share its cores evenly.
[[nodiscard]] inline int default_kernel_threads(int usable, int machine_cores, int ranks_on_machine) {
    if (usable < machine_cores) return std::max(1, usable);
    return std::max(1, usable / std::max(1, ranks_on_machine));
}

// --threads as given (0: the default above), checked.
template <class World>
[[nodiscard]] int kernel_threads(int option, World& world) {
    require(option >= 0 && option <= exec::cpu_thread_pool::max_threads, "--threads", option,
            "must be an integer in [0, " + std::to_string(exec::cpu_thread_pool::max_threads) +
                "] (0: the cores divided by the ranks of this machine)");
    if (option > 0) return option;
    const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return default_kernel_threads(usable_cores(), machine, ranks_sharing_machine(world));
}

}  // namespace weft::run
