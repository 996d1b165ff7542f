// comm::mpi: the shared communicator checks on MPI_COMM_WORLD (run under mpiexec with
// 2 and 4 ranks), plus what only the MPI backend has: native(), owned split communicators.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <string>
#include <type_traits>

#include "communicator_checks.hpp"
#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_environment.hpp"

using weft::comm::mpi;

namespace {

template <class Check>
void run_check(Check check) {
    mpi world = mpi::world();
    weft_test::expectations e;
    check(world, e);
    INFO("rank " << world.rank() << " of " << world.size());
    for (const auto& f : e.failures) FAIL_CHECK(f);
    CHECK(e.failures.empty());
}

}  // namespace

static_assert(weft::communicator<mpi>);
// Host buffers (weft does not assume a CUDA-aware MPI).
static_assert(std::is_same_v<mpi::memory_space, weft::host_space>);
static_assert(!std::is_copy_constructible_v<mpi>);
static_assert(!std::is_copy_constructible_v<mpi::request>);

TEST_CASE("mpi passes the shared communicator checks", "[comm][mpi]") {
    SECTION("point to point") { run_check([](mpi& c, auto& e) { weft_test::check_point_to_point(c, e); }); }
    SECTION("fifo per tag") { run_check([](mpi& c, auto& e) { weft_test::check_fifo_per_tag(c, e); }); }
    SECTION("out of order tags") { run_check([](mpi& c, auto& e) { weft_test::check_out_of_order_tags(c, e); }); }
    SECTION("allreduce") { run_check([](mpi& c, auto& e) { weft_test::check_allreduce(c, e); }); }
    SECTION("allgather and reduce_scatter") {
        run_check([](mpi& c, auto& e) { weft_test::check_allgather_and_reduce_scatter(c, e); });
    }
    SECTION("non-blocking collectives") {
        run_check([](mpi& c, auto& e) { weft_test::check_nonblocking_collectives(c, e); });
    }
    SECTION("broadcast") { run_check([](mpi& c, auto& e) { weft_test::check_broadcast(c, e); }); }
    SECTION("barrier") { run_check([](mpi& c, auto& e) { weft_test::check_barrier(c, e); }); }
    SECTION("split") { run_check([](mpi& c, auto& e) { weft_test::check_split(c, e); }); }
    SECTION("size mismatch") { run_check([](mpi& c, auto& e) { weft_test::check_size_mismatch(c, e); }); }
    SECTION("bad arguments") { run_check([](mpi& c, auto& e) { weft_test::check_bad_arguments(c, e); }); }
    SECTION("collective length mismatch") {
        run_check([](mpi& c, auto& e) { weft_test::check_collective_length_mismatch(c, e); });
    }
    SECTION("timeout setting") { run_check([](mpi& c, auto& e) { weft_test::check_timeout_setting(c, e); }); }
}

TEST_CASE("mpi wraps MPI_COMM_WORLD and owns what split creates", "[comm][mpi]") {
    mpi world = mpi::world();
    int rank = -1;
    int size = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(world.rank() == rank);
    CHECK(world.size() == size);
    CHECK(world.native() == MPI_COMM_WORLD);

    mpi sub = world.split(rank % 2, rank);
    MPI_Comm native = sub.native();
    CHECK(native != MPI_COMM_WORLD);
    int result = MPI_UNEQUAL;
    MPI_Comm_compare(native, MPI_COMM_WORLD, &result);
    CHECK(result != MPI_IDENT);
    mpi moved = std::move(sub);
    CHECK(moved.native() == native);
    CHECK(sub.native() == MPI_COMM_NULL);  // NOLINT(bugprone-use-after-move)
    CHECK_THROWS_WITH(sub.barrier(), Catch::Matchers::Contains("moved-from"));
    moved.barrier();
}

TEST_CASE("mpi requests dropped without wait do not crash", "[comm][mpi]") {
    mpi world = mpi::world();
    const int other = (world.rank() + 1) % world.size();
    const int from = (world.rank() + world.size() - 1) % world.size();
    {
        std::vector<std::byte> never(4);
        auto dropped = world.irecv(std::span<std::byte>(never), from, 21);  // cancelled
    }
    world.barrier();
    std::vector<std::int32_t> out = {world.rank()}, in = {-1};
    auto recv = world.irecv(weft_test::writable_bytes_of(in), from, 21);
    {
        auto send = world.isend(weft_test::bytes_of(out), other, 21);  // waited in the destructor
    }
    recv.wait();
    CHECK(in[0] == from);
}

TEST_CASE("mpi_environment leaves an MPI it did not start alone", "[comm][mpi]") {
    int argc = 0;
    char** argv = nullptr;
    {
        weft::comm::mpi_environment env(argc, argv);
        CHECK_FALSE(env.owns_mpi());
        CHECK(env.thread_level() >= MPI_THREAD_FUNNELED);
    }
    int finalized = 1;
    MPI_Finalized(&finalized);
    CHECK(finalized == 0);
}

// What happens when a wait outlasts the timeout (the watchdog ends the process) is tested
// by mpi_watchdog_probe.cpp under tests/comm/mpi_watchdog.sh, not here.
