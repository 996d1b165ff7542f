// Runs a program as a ptrace-restricted container would: `without_single_copy PROGRAM ARGS...`
// execs PROGRAM with process_vm_readv/writev refused (deny_single_copy.hpp). Placed after
// mpirun, every rank runs so; Open MPI's CMA would then end the job on its first large message,
// unless weft turned it off first.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "deny_single_copy.hpp"

int main(int argc, char* argv[]) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: without_single_copy PROGRAM [ARGS...]\n");
        return 2;
    }
    if (!weft_tests::deny_single_copy()) {
        std::fprintf(stderr, "without_single_copy: seccomp refused: %s\n", std::strerror(errno));
        return 2;
    }
    execvp(argv[1], argv + 1);
    std::fprintf(stderr, "without_single_copy: cannot run %s: %s\n", argv[1], std::strerror(errno));
    return 2;
}
