// weft/comm/mpi_single_copy.hpp: single-copy (CMA) is turned off before MPI starts exactly where
// the kernel refuses cross-process reads, and a user's own setting is left alone.
#include "weft/comm/mpi_single_copy.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <functional>
#include <string>

#include "deny_single_copy.hpp"

namespace {

// Runs `check` in a child process whose reads of other processes are refused (the filter
// cannot be lifted, so the test's own process must not get it) and returns its exit code:
// 0 where every check held, otherwise the number of the first that failed.
int in_refusing_process(const std::function<int()>& check) {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        if (!weft_tests::deny_single_copy()) _exit(100);
        _exit(check());
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
}

std::string environment(const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? "(unset)" : value;
}

}  // namespace

TEST_CASE("the probe reads another process's memory where the kernel allows it", "[single_copy]") {
    const auto probe = weft::comm::probe_single_copy();
    // This machine may refuse (a container): then the refusal names the call and the reason.
    if (probe.allowed)
        CHECK(probe.refusal.empty());
    else
        CHECK(probe.refusal.find("process_vm_readv") != std::string::npos);
}

TEST_CASE("a refused read is seen, and single-copy is turned off for Open MPI 4 and 5", "[single_copy]") {
    const int failed = in_refusing_process([] {
        const auto probe = weft::comm::probe_single_copy();
        if (probe.allowed) return 1;
        if (probe.refusal != "process_vm_readv: Operation not permitted") return 2;
        unsetenv("OMPI_MCA_btl_vader_single_copy_mechanism");
        unsetenv("OMPI_MCA_smsc");
        const auto choice = weft::comm::choose_single_copy(true);
        if (choice.decided_by != weft::comm::single_copy_choice::source::kernel_refuses) return 3;
        if (environment("OMPI_MCA_btl_vader_single_copy_mechanism") != "none") return 4;
        if (environment("OMPI_MCA_smsc") != "^cma") return 5;
        if (choice.note().find("Operation not permitted") == std::string::npos) return 6;
        return 0;
    });
    CHECK(failed == 0);
}

TEST_CASE("a user's own transport setting, or another MPI, is left alone", "[single_copy]") {
    const int failed = in_refusing_process([] {
        setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "cma", 1);
        unsetenv("OMPI_MCA_smsc");
        auto choice = weft::comm::choose_single_copy(true);
        if (choice.decided_by != weft::comm::single_copy_choice::source::user_setting) return 1;
        if (environment("OMPI_MCA_btl_vader_single_copy_mechanism") != "cma") return 2;
        if (environment("OMPI_MCA_smsc") != "(unset)") return 3;
        if (!choice.note().empty()) return 4;
        unsetenv("OMPI_MCA_btl_vader_single_copy_mechanism");
        choice = weft::comm::choose_single_copy(false);  // MPICH, say
        if (choice.decided_by != weft::comm::single_copy_choice::source::not_open_mpi) return 5;
        if (environment("OMPI_MCA_btl_vader_single_copy_mechanism") != "(unset)") return 6;
        return 0;
    });
    CHECK(failed == 0);
}
