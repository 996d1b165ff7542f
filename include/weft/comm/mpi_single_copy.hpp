// Whether Open MPI may copy a large message between processes of one machine in a single step
// (CMA: the receiver reads the sender's memory with process_vm_readv), and the fallback where
// it may not.
//
// Why weft looks: CMA is Open MPI's default and its fast path, and a container that restricts
// ptrace (Docker's default seccomp profile without CAP_SYS_PTRACE, a Yama policy) refuses the
// read at run time: Open MPI then ends the job on the first large message ("Read -1, expected
// ..., errno = 1"). Turning CMA off everywhere costs every other machine its fast path: without
// it a large message moves through a shared-memory FIFO only while its sender is inside MPI, so
// a pipeline waits on activations that were sent long ago. So weft asks the kernel once, before
// MPI starts, and turns CMA off only where the kernel refuses it. A user's own setting of the
// mechanism always wins.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#endif

namespace weft::comm {

// What the kernel said to one cross-process read.
struct single_copy_probe {
    bool allowed = false;
    std::string refusal;  // why not, e.g. "process_vm_readv: Operation not permitted"
};

// Forks a child that reads a buffer of this process with process_vm_readv, as a receiving rank
// reads its sender's: the answer holds for the ranks mpirun starts beside each other (same
// user, same container). Where Yama restricts ptrace to descendants, this process first allows
// any reader, as Open MPI does before its own reads. Call it before MPI_Init: forking afterwards
// is unsafe with some interconnects.
inline single_copy_probe probe_single_copy() {
#if defined(__linux__)
    {
        std::ifstream scope("/proc/sys/kernel/yama/ptrace_scope");
        int level = 0;
        if (scope >> level && level != 0) {
#if defined(PR_SET_PTRACER)
            prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
        }
    }
    static char source[64];
    std::memcpy(source, "weft single-copy probe", 23);
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child < 0) return {false, std::string("fork: ") + std::strerror(errno)};
    if (child == 0) {
        // Only async-signal-safe calls from here to _exit.
        char target[sizeof source] = {};
        iovec local{target, sizeof target};
        iovec remote{source, sizeof source};
        const ssize_t read = process_vm_readv(parent, &local, 1, &remote, 1, 0);
        if (read != static_cast<ssize_t>(sizeof source)) _exit(read < 0 && errno > 0 && errno < 255 ? errno : 255);
        _exit(std::memcmp(target, source, sizeof source) == 0 ? 0 : 254);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) return {false, std::string("waitpid: ") + std::strerror(errno)};
    if (!WIFEXITED(status)) return {false, "the probing process ended by signal " + std::to_string(WTERMSIG(status))};
    const int code = WEXITSTATUS(status);
    if (code == 0) return {true, {}};
    if (code == 254) return {false, "process_vm_readv read other bytes than were written"};
    if (code == 255) return {false, "process_vm_readv read fewer bytes than asked"};
    return {false, std::string("process_vm_readv: ") + std::strerror(code)};
#else
    return {false, "process_vm_readv is Linux only"};
#endif
}

// What choose_single_copy decided, for the run's log.
struct single_copy_choice {
    enum class source { not_open_mpi, user_setting, kernel_allows, kernel_refuses };
    source decided_by = source::not_open_mpi;
    std::string refusal;  // with kernel_refuses

    // One line for a log where the choice costs speed, empty where it does not.
    [[nodiscard]] std::string note() const {
        if (decided_by != source::kernel_refuses) return {};
        return "this machine refuses cross-process reads (" + refusal +
               "), so Open MPI copies large messages through shared memory instead of in one step (CMA); "
               "weft progresses them while it computes";
    }
};

namespace detail {
inline bool environment_sets(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0';
}
}  // namespace detail

// Before MPI_Init: with Open MPI, turns single-copy off where the kernel refuses it (Open MPI
// 4's vader BTL and Open MPI 5's smsc framework both read these at MPI_Init), unless the user
// set either. `is_open_mpi` is the caller's OPEN_MPI, so this header needs no mpi.h.
inline single_copy_choice choose_single_copy(bool is_open_mpi) {
    using source = single_copy_choice::source;
    if (!is_open_mpi) return {source::not_open_mpi, {}};
    if (detail::environment_sets("OMPI_MCA_btl_vader_single_copy_mechanism") ||
        detail::environment_sets("OMPI_MCA_smsc"))
        return {source::user_setting, {}};
    const auto probe = probe_single_copy();
    if (probe.allowed) return {source::kernel_allows, {}};
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    setenv("OMPI_MCA_smsc", "^cma", 0);
    return {source::kernel_refuses, probe.refusal};
}

}  // namespace weft::comm
