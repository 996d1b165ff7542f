// The MPI watchdog (weft/comm/watchdog.hpp) in a real job, run by mpi_watchdog.sh under
// mpirun: a wait past the timeout must end the process with exit code 2 and a report
// (which mpirun turns into the end of the job), and waits within the timeout, or on a
// communicator set to no_timeout, must not.
//   mpi_watchdog_probe recv|collective|within|untimed
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_environment.hpp"
#include "weft/comm/watchdog.hpp"

using namespace std::chrono_literals;
using weft::comm::mpi;

namespace {

std::string describe_probe(const void*, const void* item) {
    return "probe action " + std::to_string(*static_cast<const int*>(item));
}

// Long enough that only mpirun (after the watchdog ended another rank) ends it.
void sleep_until_killed() { std::this_thread::sleep_for(120s); }

}  // namespace

int main(int argc, char** argv) {
    weft::comm::mpi_environment environment(argc, argv);
    weft::comm::set_watchdog_label("mpi_watchdog_probe");
    const std::string mode = argc > 1 ? argv[1] : "";
    mpi world = mpi::world();
    const int n = world.size();
    if (mode == "recv") {
        // World rank 0 receives from a rank that never sends. Keys reversed: group rank g is
        // world rank n-1-g, so the report must translate the peer to its world rank.
        mpi sub = world.split(0, n - 1 - world.rank());
        sub.set_timeout(500ms);
        world.barrier();
        if (world.rank() != 0) sleep_until_killed();
        const weft::comm::activity_scope activity(&mode, &describe_probe);
        const int action = 7;
        weft::comm::activity_scope::set_item(&action);
        std::vector<std::byte> buffer(8);
        sub.irecv(std::span<std::byte>(buffer), 0, 17).wait();  // group rank 0 = world rank n-1
        std::printf("FAIL: the receive returned\n");
        return 1;
    }
    if (mode == "collective") {
        // World rank 0 never joins; the others wait in the allreduce's length agreement.
        mpi sub = world.split(0, world.rank());
        sub.set_timeout(500ms);
        world.barrier();
        if (world.rank() == 0) sleep_until_killed();
        std::vector<float> values(3, 1.0f);
        sub.allreduce_sum(std::span<float>(values));
        std::printf("FAIL: the allreduce returned\n");
        return 1;
    }
    if (mode == "within") {
        // Many short waits and one of 300 ms, all within a 1 s timeout, then idle time in
        // which the monitor looks at an empty record: nothing is reported.
        mpi sub = world.split(0, world.rank());
        sub.set_timeout(1s);
        for (int i = 0; i < 2000; ++i) {
            float x = 1.0f;
            sub.allreduce_sum(std::span<float>(&x, 1));
            if (x != static_cast<float>(n)) return 1;
        }
        std::vector<std::byte> buffer(8);
        if (sub.rank() == 0) {
            auto r = sub.irecv(std::span<std::byte>(buffer), 1, 3);
            r.wait();
        } else if (sub.rank() == 1) {
            std::this_thread::sleep_for(300ms);
            sub.isend(std::span<const std::byte>(buffer), 0, 3).wait();
        }
        sub.barrier();
        std::this_thread::sleep_for(1500ms);
        sub.barrier();
        if (world.rank() == 0) std::printf("probe within: passed\n");
        return 0;
    }
    if (mode == "untimed") {
        // The world has a short timeout, the split no timeout at all: a 1.5 s wait on the
        // split is not watched.
        world.set_timeout(300ms);
        mpi sub = world.split(0, world.rank());
        sub.set_timeout(weft::comm::no_timeout);
        std::vector<std::byte> buffer(8);
        if (sub.rank() == 0) {
            sub.irecv(std::span<std::byte>(buffer), 1, 3).wait();
        } else if (sub.rank() == 1) {
            std::this_thread::sleep_for(1500ms);
            sub.isend(std::span<const std::byte>(buffer), 0, 3).wait();
        }
        sub.barrier();
        world.set_timeout(60s);
        world.barrier();
        if (world.rank() == 0) std::printf("probe untimed: passed\n");
        return 0;
    }
    std::fprintf(stderr, "usage: mpi_watchdog_probe recv|collective|within|untimed\n");
    return 64;
}
