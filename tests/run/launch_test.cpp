#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>

#include "weft/run/launch.hpp"

namespace {

int launch_on_threads(auto&& ranks, auto&& train) {
    int argc = 1;
    char name[] = "test_run";
    char* args[] = {name, nullptr};
    char** argv = args;
    return weft::run::launch("test_run", argc, argv, ranks, train);
}

}  // namespace

TEST_CASE("launch runs every rank and maps how a run ends to the table of exit codes", "[run][launch]") {
    using weft::run::exit_code::done;
    std::atomic<int> ran{0};
    CHECK(launch_on_threads(3, [&](weft::comm::local& world) {
              CHECK(world.size() == 3);
              ++ran;
          }) == done);
    CHECK(ran == 3);
    // A failure on one rank is exit code 2, and the other ranks are not left waiting on it.
    CHECK(launch_on_threads(2, [](weft::comm::local& world) {
              if (world.rank() == 1) throw weft::error("planted");
              double x[1] = {1};
              world.allreduce_sum(std::span<double>(x));
          }) == weft::run::exit_code::failed);
    // A stop every rank agreed on carries its own code.
    CHECK(launch_on_threads(2, [](weft::comm::local&) {
              throw weft::run::stopped("planted stop", weft::run::exit_code::nonfinite);
          }) == weft::run::exit_code::nonfinite);
    CHECK(launch_on_threads(2, [](weft::comm::local&) { throw std::bad_alloc(); }) ==
          weft::run::exit_code::failed);
    CHECK(launch_on_threads(0, [](weft::comm::local&) {}) == weft::run::exit_code::failed);
}

TEST_CASE("ranks_to_run takes the layout's product, and a refused layout is exit code 2", "[run][launch]") {
    if (weft::run::launched_by_mpirun()) return;  // mpirun decides the ranks there
    CHECK(weft::run::ranks_to_run("--pp x --dp", 6, 0) == 6);
    CHECK(weft::run::ranks_to_run("--pp x --dp", 6, 2) == 2);
    CHECK_THROWS_WITH(weft::run::ranks_to_run("--pp x --dp", 1LL << 32, 0),
                      Catch::Contains("--pp x --dp = 4294967296 is invalid: must be at most 65536 ranks"));
    int ranks_asked = 0;
    CHECK(launch_on_threads(
              [&] {
                  ++ranks_asked;
                  return weft::run::ranks_to_run("--pp", 1LL << 20, 0);
              },
              [](weft::comm::local&) {}) == weft::run::exit_code::failed);
    CHECK(ranks_asked == 1);
}

TEST_CASE("ranks of a machine take its GPUs in turn", "[run][launch]") {
    CHECK(weft::run::gpu_of(0, 4) == 0);
    CHECK(weft::run::gpu_of(5, 4) == 1);
    CHECK(weft::run::gpu_of(3, 0) == 0);  // no GPU: the caller reports it
    launch_on_threads(3, [](weft::comm::local& world) { CHECK(weft::run::local_rank(world) == world.rank()); });
}
