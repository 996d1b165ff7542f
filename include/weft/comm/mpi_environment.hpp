// RAII for MPI's lifetime in a program's main(): initialises MPI unless something else
// already did, and finalises it only if it was the one that initialised it, so that
// libraries and test mains that manage MPI themselves can still use it.
#pragma once

#include "weft/comm/mpi_header.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_single_copy.hpp"
#include "weft/core/call_or_end_process.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

class mpi_environment {
public:
    // MPI_THREAD_FUNNELED suffices: weft calls MPI only from the thread that drives training.
    // `wanted` is asked for and may be refused down to `required` (an elastic run asks for
    // MPI_THREAD_MULTIPLE and does without what needs it).
    mpi_environment(int& argc, char**& argv, int required = MPI_THREAD_FUNNELED, int wanted = MPI_THREAD_FUNNELED) {
        int initialized = 0;
        detail::mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
        if (initialized == 0) {
            single_copy_ = choose_single_copy(is_open_mpi);
            detail::mpi_check(MPI_Init_thread(&argc, &argv, std::max(required, wanted), &provided_), "MPI_Init_thread");
            owns_ = true;
        } else {
            detail::mpi_check(MPI_Query_thread(&provided_), "MPI_Query_thread");
        }
        if (provided_ < required) {
            if (owns_) MPI_Finalize();
            owns_ = false;
            throw invalid_argument("required", required,
                                   "MPI provides only thread level " + std::to_string(provided_));
        }
    }

    mpi_environment(const mpi_environment&) = delete;
    mpi_environment& operator=(const mpi_environment&) = delete;

    ~mpi_environment() {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (owns_ && finalized == 0) MPI_Finalize();
    }

    // Finalises MPI now (where this object initialised it), but ends the process with
    // `exit_code` should that take longer than `bound`. Why: Open MPI 5 with ULFM ends
    // MPI_Finalize with a fence over the job's processes that now and then never completes
    // once one of them was lost (seen here about once in 70 runs of a crash test: every
    // survivor waiting in ompi_mpi_finalize for good).
    void finalize_within(std::chrono::milliseconds bound, int exit_code) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!owns_ || finalized != 0) return;
        call_or_end_process(bound, exit_code, "MPI_Finalize", [] { MPI_Finalize(); });
    }

    [[nodiscard]] int thread_level() const { return provided_; }
    // How large messages between this machine's ranks are copied (decided before MPI_Init;
    // not_open_mpi also where MPI was initialised by someone else).
    [[nodiscard]] const single_copy_choice& single_copy() const { return single_copy_; }
    [[nodiscard]] bool owns_mpi() const { return owns_; }

private:
#if defined(OPEN_MPI)
    static constexpr bool is_open_mpi = true;
#else
    static constexpr bool is_open_mpi = false;
#endif
    int provided_ = MPI_THREAD_SINGLE;
    single_copy_choice single_copy_;
    bool owns_ = false;
};

}  // namespace weft::comm
