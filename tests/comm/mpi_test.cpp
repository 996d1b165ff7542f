// comm::mpi: the shared communicator checks on MPI_COMM_WORLD (run under mpiexec with
// 2 and 4 ranks), plus what only the MPI backend has: native(), owned split communicators.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

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

// A non-blocking collective's start does not wait for the other ranks: rank 0 starts an
// allreduce and only then sends the message that rank 1 waits for before it starts its own.
// Had the start blocked on the ranks' length agreement (as it did), rank 0 would wait there
// for rank 1, which waits for rank 0's message: the test would hang until the watchdog ends
// it. A second collective started on another group meanwhile is posted by that group's
// calls, and a mismatched start is refused at wait() on every rank, with nothing posted.
TEST_CASE("mpi starts a non-blocking collective without waiting for the other ranks", "[comm][mpi]") {
    mpi world = mpi::world();
    world.set_timeout(std::chrono::seconds(20));
    const int rank = world.rank();
    std::vector<double> values(5, rank + 1.0);
    std::byte token[1] = {std::byte{7}};
    // Rank 0 starts, then tells the others; they start once told.
    if (rank == 0) {
        auto reduced = world.iallreduce_sum(std::span<double>(values));
        for (int peer = 1; peer < world.size(); ++peer) world.isend(std::span<const std::byte>(token), peer, 5).wait();
        reduced.wait();
    } else {
        world.irecv(std::span<std::byte>(token), 0, 5).wait();
        auto reduced = world.iallreduce_sum(std::span<double>(values));
        reduced.wait();
    }
    const double sum = world.size() * (world.size() + 1) / 2.0;
    CHECK(values == std::vector<double>(5, sum));

    // Two started back to back and waited in reverse: their order on every rank is kept.
    std::vector<float> first(3, 1.0f);
    std::vector<float> second(2, 2.0f);
    auto a = world.iallreduce_sum(std::span<float>(first));
    auto b = world.iallreduce_sum(std::span<float>(second));
    b.wait();
    a.wait();
    CHECK(first == std::vector<float>(3, float(world.size())));
    CHECK(second == std::vector<float>(2, 2.0f * float(world.size())));

    // A length mismatch: refused on every rank when waited for, and the next collective runs.
    std::vector<float> uneven(rank == 0 ? 4 : 3, 1.0f);
    auto refused = world.iallreduce_sum(std::span<float>(uneven));
    CHECK_THROWS_WITH(refused.wait(), Catch::Matchers::Contains("collective mismatch") &&
                                          Catch::Matchers::Contains("lengths from 3 to 4"));
    std::vector<float> after(2, 1.0f);
    world.allreduce_sum(std::span<float>(after));
    CHECK(after == std::vector<float>(2, float(world.size())));
}
