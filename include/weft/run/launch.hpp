// Launching a training program: run a function of the world on an MPI world (under mpirun)
// or on N ranks as threads of this process, turn any failure into a message and an exit
// code of run/exit_codes.hpp without ever hanging, and map a rank to its GPU and cores.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/comm/local.hpp"
#include "weft/core/error.hpp"
#include "weft/run/exit_codes.hpp"
#include "weft/run/join_handshake.hpp"
#if WEFT_HAS_MPI
#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_environment.hpp"
#include "weft/run/elastic_session.hpp"
#endif

namespace weft::run {

[[nodiscard]] inline bool launched_by_mpirun() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(name) != nullptr) return true;
    return false;
}

// The ranks to run: --ranks when given (0: not given) or under mpirun (whose -np is the
// world), else one thread per rank of the layout, `layout_ranks` (the product of the
// parallel degrees, named by `factors`, e.g. "--pp x --dp"). Refuses a layout of more than
// 65536 ranks.
[[nodiscard]] inline int ranks_to_run(const char* factors, long long layout_ranks, int ranks_option) {
    require(layout_ranks <= (1 << 16), factors, layout_ranks, "must be at most 65536 ranks");
    if (launched_by_mpirun() || ranks_option != 0) return ranks_option;
    return static_cast<int>(layout_ranks);
}

// The rank's index among the ranks of its node as the launcher tells it (Open MPI, MPICH and
// Intel MPI, Slurm), or nullopt.
[[nodiscard]] inline std::optional<int> launcher_local_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
        if (const char* value = std::getenv(name); value != nullptr) return std::atoi(value);
    return std::nullopt;
}

// The rank's index among the ranks that share its machine: ranks as threads all do, so it is
// the rank itself.
[[nodiscard]] inline int local_rank(comm::local& world) { return world.rank(); }
#if WEFT_HAS_MPI
// Collective over `world` where the launcher does not say: MPI_Comm_split_type groups the
// ranks that share memory.
[[nodiscard]] inline int local_rank(comm::mpi& world) {
    if (const auto told = launcher_local_rank()) return *told;
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(world.native(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &node);
    int rank = world.rank();
    if (node != MPI_COMM_NULL) {
        MPI_Comm_rank(node, &rank);
        MPI_Comm_free(&node);
    }
    return rank;
}
#endif

// The GPU a rank computes on: ranks of a machine take its GPUs in turn (several may share one).
[[nodiscard]] inline int gpu_of(int local_rank, int gpus) { return gpus > 0 ? local_rank % gpus : 0; }

// Optional: binds the calling thread to core local_rank % (cores it may use), so ranks of one
// machine do not migrate onto each other's caches. Returns the core, or -1 when the system
// would not (the run goes on unpinned).
inline int pin_to_core(int local_rank) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return -1;
    const int count = CPU_COUNT(&allowed);
    if (count <= 0) return -1;
    int wanted = local_rank % count;
    for (int core = 0; core < CPU_SETSIZE; ++core) {
        if (!CPU_ISSET(core, &allowed)) continue;
        if (wanted-- > 0) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(core, &one);
        return sched_setaffinity(0, sizeof one, &one) == 0 ? core : -1;
    }
    return -1;
}

namespace detail {

// The thread level a program asks MPI for: an elastic run (--elastic on the command line, read
// before MPI_Init, which comes before the options are parsed) wants MPI_THREAD_MULTIPLE, as its
// watchdog revokes communicators from the monitor's thread and a join is prepared on a thread
// of its own; it does without both where the MPI refuses. Other runs call MPI from one thread.
[[nodiscard]] inline bool wants_thread_multiple(int argc, char** argv) {
    for (int i = 1; i < argc; ++i)
        if (std::string_view(argv[i]) == "--elastic") return true;
    return false;
}

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

// How long MPI_Finalize may take after a run that survives lost peers before the process ends
// anyway (mpi_environment::finalize_within); it takes milliseconds when it works.
inline constexpr std::chrono::seconds finalize_bound{10};

}  // namespace detail

// Calls train(world) on the MPI world (under mpirun) or on `ranks` threads, and returns the
// process exit code (run/exit_codes.hpp). Under MPI a failing rank aborts the job: another
// rank may be waiting for it, and MPI_Finalize would then wait forever. Under --elastic with
// ULFM it ends alone instead, and the others recover from it as from a crash. argc and argv go to
// MPI_Init only, so a build without MPI leaves them unused.
// `ranks_or_function` is the thread count, or a function returning it (ranks_to_run), called
// where its refusal becomes exit code 2 like any other.
template <class Ranks, class Train>
int launch(const char* program, [[maybe_unused]] int& argc, [[maybe_unused]] char**& argv,
           Ranks&& ranks_or_function, Train&& train) {
    try {
        const int ranks = [&] {
            if constexpr (std::is_invocable_v<Ranks&>)
                return static_cast<int>(ranks_or_function());
            else
                return static_cast<int>(ranks_or_function);
        }();
        if (launched_by_mpirun()) {
#if WEFT_HAS_MPI
            detail::launch_arguments().assign(argv, argv + argc);
            comm::mpi_environment environment(
                argc, argv, MPI_THREAD_FUNNELED,
                detail::wants_thread_multiple(argc, argv) ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED);
            // A wait past --comm-timeout is reported by the watchdog's thread, which then ends
            // the process with exit code 2 (weft/comm/watchdog.hpp); its lines start like ours.
            comm::set_watchdog_label(program);
            if (const auto note = environment.single_copy().note(); !note.empty() && comm::mpi::world().rank() == 0)
                std::fprintf(stderr, "%s: note: %s\n", program, note.c_str());
            const int code = [&]() -> int {
                // A process an elastic run's grow started, or one launched with --join, joins the
                // running job's world (after its ranks).
                auto world = joined_world(detail::join_option(argc, argv)).value_or(comm::mpi::world());
                try {
                    require(ranks == 0 || ranks == world.size(), "--ranks", ranks,
                            "under mpirun the world size is mpirun's -np (" + std::to_string(world.size()) +
                                "); omit --ranks");
                    detail::train_explaining_memory(train, world);
                    return exit_code::done;
                } catch (const stopped& stop) {
                    if (world.rank() == 0) std::fprintf(stderr, "%s: %s\n", program, stop.what());
                    return stop.exit_code();
                } catch (const left_the_run&) {
                    // --elastic: this rank handed its state over. Under ULFM it ends now, freeing its
                    // node (MPI_Finalize would wait for the others); without, MPI_Finalize waits.
                    std::fflush(stdout);
                    std::fflush(stderr);
                    if constexpr (comm::has_ulfm()) std::_Exit(exit_code::done);
                    return exit_code::done;
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "%s (rank %d): %s\n", program, world.rank(), e.what());
                    std::fflush(stderr);
                    // --elastic under ULFM: this rank's failure is the others' crash to recover
                    // from, so it ends alone; otherwise the whole job ends.
                    if (comm::peer_loss_recovery()) {
                        std::fflush(stdout);
                        std::_Exit(exit_code::failed);
                    }
                    if (world.size() > 1) MPI_Abort(MPI_COMM_WORLD, exit_code::failed);
                    return exit_code::failed;
                }
            }();
            // A run that survives lost peers (--elastic under ULFM) has its work done and
            // written by now; MPI_Finalize may still wait for a lost peer for good (see
            // finalize_within), or for a join's start given up, so it is bounded.
            if (comm::peer_loss_recovery() || detail::finalize_may_wait.load())
                environment.finalize_within(detail::finalize_bound, code);
            return code;
#else
            throw weft::error(std::string("this ") + program +
                              " was built without MPI; run it without mpirun and use --ranks");
#endif
        }
        require(ranks >= 1, "--ranks", ranks, "must be >= 1");
        std::mutex lock;
        std::optional<stopped> stop;
        comm::local::run(ranks, [&](comm::local& world) {
            try {
                detail::train_explaining_memory(train, world);
            } catch (const stopped& s) {
                const std::lock_guard guard(lock);
                if (!stop) stop = s;
            }
        });
        if (!stop) return exit_code::done;
        std::fprintf(stderr, "%s: %s\n", program, stop->what());
        return stop->exit_code();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return exit_code::failed;
    }
}

}  // namespace weft::run
