// Proves that this build's MPI survives a crash (ULFM, issue 48): 3 ranks allreduce once;
// rank 2 SIGKILLs itself; the survivors' next allreduce returns MPIX_ERR_PROC_FAILED or
// MPIX_ERR_REVOKED, they revoke and shrink the communicator, and allreduce on the 2 that are
// left. Plain MPI (weft only for <mpi.h>): it checks the environment (the `ft` preset's Open MPI 5 and
// `mpirun --with-ft ulfm`), not weft's code. Built only where CMake found MPIX_Comm_shrink.
// Exit 0 and "ulfm_probe: ok" from each survivor on success; exit 1 with a message otherwise.
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <weft/comm/mpi_header.hpp>  // <mpi.h> without the deprecated C++ bindings

#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Comm_revoke, MPIX_Comm_shrink, MPIX_ERR_*

namespace {

[[noreturn]] void fail(int rank, const char* what, int code) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    int error_class = 0;
    if (code != MPI_SUCCESS) {
        MPI_Error_string(code, text, &length);
        MPI_Error_class(code, &error_class);
    }
    std::fprintf(stderr, "ulfm_probe: rank %d: %s (code %d, class %d: %s)\n", rank, what, code, error_class, text);
    std::fflush(stderr);
    // MPI_Abort would take the whole job down and its exit code with it: that is the failure.
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 3) {
        if (rank == 0) std::fprintf(stderr, "ulfm_probe: needs 3 ranks, got %d\n", size);
        MPI_Finalize();
        return 1;
    }
    // Errors come back as codes on every communicator made from here on (the shrunk one too).
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int value = rank + 1;
    int sum = 0;
    int rc = MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS || sum != 6) fail(rank, "first allreduce on 3 ranks", rc);

    if (rank == 2) {
        std::fflush(stdout);
        std::raise(SIGKILL);  // a crash: no MPI_Finalize, no goodbye to the others
        std::_Exit(9);        // not reached
    }

    rc = MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS) fail(rank, "allreduce with a dead rank succeeded", rc);
    int error_class = 0;
    MPI_Error_class(rc, &error_class);
    if (error_class != MPIX_ERR_PROC_FAILED && error_class != MPIX_ERR_REVOKED)
        fail(rank, "allreduce with a dead rank: not MPIX_ERR_PROC_FAILED or MPIX_ERR_REVOKED", rc);

    // The other survivor may have seen no error yet: revoking makes every pending and later call
    // on the communicator fail, so both reach the shrink.
    rc = MPIX_Comm_revoke(MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) fail(rank, "MPIX_Comm_revoke", rc);
    MPI_Comm survivors = MPI_COMM_NULL;
    rc = MPIX_Comm_shrink(MPI_COMM_WORLD, &survivors);
    if (rc != MPI_SUCCESS) fail(rank, "MPIX_Comm_shrink", rc);
    MPI_Comm_set_errhandler(survivors, MPI_ERRORS_RETURN);
    int new_size = 0;
    int new_rank = 0;
    MPI_Comm_size(survivors, &new_size);
    MPI_Comm_rank(survivors, &new_rank);
    if (new_size != 2) fail(rank, "shrunk communicator's size is not 2", MPI_SUCCESS);

    rc = MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, survivors);
    if (rc != MPI_SUCCESS) fail(rank, "allreduce on the shrunk communicator", rc);
    if (sum != 3) {  // ranks 0 and 1: 1 + 2
        std::fprintf(stderr, "ulfm_probe: rank %d: sum on the survivors is %d, not 3\n", rank, sum);
        fail(rank, "wrong sum on the shrunk communicator", MPI_SUCCESS);
    }
    MPI_Comm_free(&survivors);
    std::printf("ulfm_probe: ok (rank %d of 3, rank %d of 2 after the shrink)\n", rank, new_rank);
    std::fflush(stdout);
    MPI_Finalize();
    return 0;
}
