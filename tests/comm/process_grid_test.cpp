// comm::process_grid: every factorization pp x dp x tp of worlds 1..8 gives each rank
// the coordinates of the documented placement, and groups whose members are exactly
// the ranks that differ from it in one coordinate, ordered by that coordinate.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "weft/comm/local.hpp"
#include "weft/comm/process_grid.hpp"
#include "weft/core/error.hpp"

using weft::comm::local;

namespace {

struct factorization {
    int pp, dp, tp;
};

std::vector<factorization> factorizations_of(int world) {
    std::vector<factorization> out;
    for (int pp = 1; pp <= world; ++pp)
        for (int dp = 1; pp * dp <= world; ++dp)
            if (world % (pp * dp) == 0) out.push_back({pp, dp, world / (pp * dp)});
    return out;
}

// The world ranks of `group`'s members, in group-rank order.
std::vector<float> members_of(local& group, int world_rank) {
    const float mine[1] = {static_cast<float>(world_rank)};
    std::vector<float> all(static_cast<std::size_t>(group.size()));
    group.allgather(std::span<const float>(mine), std::span<float>(all));
    return all;
}

}  // namespace

TEST_CASE("process_grid places tensor-parallel ranks adjacent, then replicas, then stages", "[comm][grid]") {
    const int world = GENERATE(1, 2, 4, 6, 8);
    for (const auto f : factorizations_of(world)) {
        INFO("world " << world << ": pp " << f.pp << " dp " << f.dp << " tp " << f.tp);
        const weft::parallel_config cfg(
            {.pp = f.pp, .dp = f.dp, .tp = f.tp, .microbatches = f.pp, .world_size = world});
        std::mutex mutex;
        std::vector<std::string> failures;
        local::run(world, [&](local& comm) {
            weft::comm::process_grid<local> grid(comm, cfg);
            const auto c = grid.coordinates();
            const int r = comm.rank();
            std::vector<std::string> mine;
            auto expect = [&](bool ok, const std::string& what) {
                if (!ok) mine.push_back("rank " + std::to_string(r) + ": " + what);
            };
            expect(r == (c.pp_index * f.dp + c.dp_index) * f.tp + c.tp_index, "rank = (pp*dp + dp)*tp + tp");
            expect(weft::comm::grid_rank_of(c, cfg) == r, "grid_rank_of inverts grid_coordinates_of");
            std::vector<float> pipeline, data, tensor;
            for (int i = 0; i < f.pp; ++i)
                pipeline.push_back(float(weft::comm::grid_rank_of({i, c.dp_index, c.tp_index}, cfg)));
            for (int i = 0; i < f.dp; ++i)
                data.push_back(float(weft::comm::grid_rank_of({c.pp_index, i, c.tp_index}, cfg)));
            for (int i = 0; i < f.tp; ++i)
                tensor.push_back(float(weft::comm::grid_rank_of({c.pp_index, c.dp_index, i}, cfg)));
            expect(members_of(grid.pipeline(), r) == pipeline && grid.pipeline().rank() == c.pp_index,
                   "pipeline group = same replica and slice, ordered by stage");
            expect(members_of(grid.data(), r) == data && grid.data().rank() == c.dp_index,
                   "data group = same stage and slice, ordered by replica");
            expect(members_of(grid.tensor(), r) == tensor && grid.tensor().rank() == c.tp_index,
                   "tensor group = same stage and replica, ordered by slice");
            if (f.tp > 1)
                expect(tensor.back() - tensor.front() == float(f.tp - 1), "tensor-parallel ranks are adjacent");
            std::lock_guard lock(mutex);
            failures.insert(failures.end(), mine.begin(), mine.end());
        });
        for (const auto& failure : failures) FAIL_CHECK(failure);
        CHECK(failures.empty());
    }
}

TEST_CASE("process_grid rejects a factorization that does not match the world", "[comm][grid]") {
    // parallel_config refuses pp*dp*tp != world_size, naming the product and each degree.
    try {
        weft::parallel_config bad({.pp = 2, .dp = 2, .tp = 3, .microbatches = 2, .world_size = 8});
        FAIL("no error");
    } catch (const weft::error& e) {
        CHECK_THAT(e.what(), Catch::Matchers::Contains("pp*dp*tp") && Catch::Matchers::Contains("12") &&
                                 Catch::Matchers::Contains("world size 8"));
    }
    // A config for another world size than the communicator's is refused by the grid.
    std::string message;
    try {
        local::run(2, [&](local& comm) {
            const weft::parallel_config cfg({.pp = 1, .dp = 4, .world_size = 4});
            weft::comm::process_grid<local> grid(comm, cfg);
        });
    } catch (const weft::error& e) {
        message = e.what();
    }
    CHECK_THAT(message, Catch::Matchers::Contains("communicator size") && Catch::Matchers::Contains("4"));
}

