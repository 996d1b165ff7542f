// What weft's example programs share: run a training function on an MPI world when
// started by mpirun, or on N ranks as threads of this process otherwise, and turn any
// failure into a message and exit code 2 without ever hanging; a stop every rank agreed
// on (run_stopped) exits with its own code.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <string>

#include "weft/comm/local.hpp"
#include "weft/core/error.hpp"
#if WEFT_HAS_MPI
#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_environment.hpp"
#endif

namespace weft_examples {

// Ends a run on every rank at once, at the same point of training, with a documented exit
// code (train_gpt: 3 for a non-finite step): the ranks agreed, so it is not one rank's
// failure and MPI is finalized, not aborted. Throw it only on a decision every rank makes.
class run_stopped : public weft::error {
public:
    run_stopped(const std::string& message, int exit_code) : weft::error(message), exit_code_(exit_code) {}
    [[nodiscard]] int exit_code() const { return exit_code_; }

private:
    int exit_code_;
};

// train(world), with an allocation failure turned into advice: a bare std::bad_alloc says
// nothing about what to change.
template <class Train, class World>
void train_explaining_memory(Train& train, World& world) {
    try {
        train(world);
    } catch (const std::bad_alloc&) {
        throw weft::error("out of memory on rank " + std::to_string(world.rank()) +
                          ": use a smaller --batch, --seq-len or model, more micro-batches, more ranks "
                          "(--pp, --tp) or a higher --zero stage");
    }
}

inline bool launched_by_mpirun() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(name) != nullptr) return true;
    return false;
}

// The ranks to run: --ranks when given (0: not given) or under mpirun (whose -np is the
// world), else one thread per rank of the layout, `layout_ranks` (the product of the
// parallel degrees, named by `factors`, e.g. "--pp x --dp"). A layout of more than 65536
// ranks is refused; nullopt after printing why.
[[nodiscard]] inline std::optional<int> ranks_to_run(const char* program, const char* factors,
                                                     long long layout_ranks, int ranks_option) {
    if (layout_ranks > (1 << 16)) {
        std::fprintf(stderr, "%s: weft: %s = %lld is invalid: must be at most 65536 ranks\n", program, factors,
                     layout_ranks);
        return std::nullopt;
    }
    if (launched_by_mpirun() || ranks_option != 0) return ranks_option;
    return static_cast<int>(layout_ranks);
}

// Calls train(world) on the MPI world (under mpirun) or on `ranks` threads, and returns
// the process exit code. Under MPI a failing rank aborts the job: another rank may be
// waiting for it, and MPI_Finalize would then wait forever. argc and argv go to MPI_Init
// only, so a build without MPI leaves them unused.
template <class Train>
int run(const char* program, [[maybe_unused]] int& argc, [[maybe_unused]] char**& argv, int ranks, Train&& train) {
    try {
        if (launched_by_mpirun()) {
#if WEFT_HAS_MPI
            weft::comm::mpi_environment environment(argc, argv);
            // A wait past --comm-timeout is reported by the watchdog's thread, which then ends
            // the process with exit code 2 (weft/comm/watchdog.hpp); its lines start like ours.
            weft::comm::set_watchdog_label(program);
            auto world = weft::comm::mpi::world();
            try {
                weft::require(ranks == 0 || ranks == world.size(), "--ranks", ranks,
                              "under mpirun the world size is mpirun's -np (" + std::to_string(world.size()) +
                                  "); omit --ranks");
                train_explaining_memory(train, world);
                return 0;
            } catch (const run_stopped& stop) {
                if (world.rank() == 0) std::fprintf(stderr, "%s: %s\n", program, stop.what());
                return stop.exit_code();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "%s (rank %d): %s\n", program, world.rank(), e.what());
                std::fflush(stderr);
                if (world.size() > 1) MPI_Abort(MPI_COMM_WORLD, 2);
                return 2;
            }
#else
            throw weft::error(std::string("this ") + program +
                              " was built without MPI; run it without mpirun and use --ranks");
#endif
        }
        weft::require(ranks >= 1, "--ranks", ranks, "must be >= 1");
        std::mutex lock;
        std::optional<run_stopped> stopped;
        weft::comm::local::run(ranks, [&](weft::comm::local& world) {
            try {
                train_explaining_memory(train, world);
            } catch (const run_stopped& stop) {
                const std::lock_guard guard(lock);
                if (!stopped) stopped = stop;
            }
        });
        if (!stopped) return 0;
        std::fprintf(stderr, "%s: %s\n", program, stopped->what());
        return stopped->exit_code();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 2;
    }
}

}  // namespace weft_examples
