// The main() shared by weft's MPI tests: MPI is initialised around Catch2's run,
// and the exit code is agreed over all ranks so that one failing rank fails the test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include "weft/comm/mpi_single_copy.hpp"

#include <cstdio>

int main(int argc, char* argv[]) {
    int provided = 0;
#if defined(OPEN_MPI)
    weft::comm::choose_single_copy(true);  // as weft::comm::mpi_environment does
#endif
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    Catch::Session session;
    // Only rank 0 prints successes; every rank prints its own failures.
    int failures = session.run(argc, argv);
    int any_failures = 0;
    MPI_Allreduce(&failures, &any_failures, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failures != 0) std::fprintf(stderr, "rank %d: %d test failure(s)\n", rank, failures);
    MPI_Finalize();
    return any_failures == 0 ? 0 : 1;
}
