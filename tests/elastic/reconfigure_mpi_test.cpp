// Online layout switching over MPI, one process per rank: every ordered pair of the world-4
// layouts keeps every tensor and AdamW moment bit for bit (compared as a hash per tensor,
// all-gathered, since the processes share no memory) and moves exactly the lower bound.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "elastic_layouts.hpp"
#include "weft/comm/mpi.hpp"
#include "weft/train/checkpoint.hpp"

namespace {

using weft::comm::mpi;
using namespace weft_test::elastic;
using mpi_engine = gpt_engine<mpi>;

std::uint64_t fnv1a(std::span<const float> values) {
    std::uint64_t h = 1469598103934665603ULL;
    for (const std::byte b : std::as_bytes(values)) {
        h ^= static_cast<std::uint64_t>(b);
        h *= 1099511628211ULL;
    }
    return h;
}

// Per tensor name (parameters, "<name>.exp_avg", "<name>.exp_avg_sq"): the hash of the whole
// tensor, from the ranks of replica 0 and tensor-parallel rank 0, known on every rank. Two
// holders that disagree make the name map to 0.
std::map<std::string, std::uint64_t> fingerprint(mpi_engine& engine, mpi& world) {
    std::vector<std::string> names;
    for (const auto& t : engine.layout().tensor_names())
        for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) names.push_back(t + suffix);
    std::map<std::string, std::uint64_t> mine;
    if (!engine.is_spare()) {
        const auto full = weft::train::gather_full_stages(engine);
        if (engine.parts().coordinates().dp_index == 0 && engine.parts().coordinates().tp_index == 0)
            for (const auto& f : full)
                for (const auto& info : f.registry.entries()) {
                    const auto part = [&](std::span<const float> v) {
                        return v.empty() ? std::span<const float>()
                                         : v.subspan(info.offset, info.size);
                    };
                    mine[info.name] = fnv1a(part(f.parameters));
                    for (const auto& t : f.optimizer.tensors) mine[info.name + "." + t.name] = fnv1a(part(t.values));
                }
    }
    // [held, high 32 bits, low 32 bits] per name: exact in doubles.
    std::vector<double> table(3 * names.size(), 0.0);
    for (std::size_t i = 0; i < names.size(); ++i)
        if (const auto it = mine.find(names[i]); it != mine.end()) {
            table[3 * i] = 1;
            table[3 * i + 1] = static_cast<double>(it->second >> 32);
            table[3 * i + 2] = static_cast<double>(it->second & 0xffffffffULL);
        }
    std::vector<double> all(table.size() * static_cast<std::size_t>(world.size()));
    world.allgather(std::span<const double>(table), std::span<double>(all));
    std::map<std::string, std::uint64_t> out;
    for (std::size_t i = 0; i < names.size(); ++i)
        for (int r = 0; r < world.size(); ++r) {
            const double* e = all.data() + table.size() * static_cast<std::size_t>(r) + 3 * i;
            if (e[0] == 0) continue;
            const std::uint64_t h = (static_cast<std::uint64_t>(e[1]) << 32) | static_cast<std::uint64_t>(e[2]);
            const auto [it, added] = out.emplace(names[i], h);
            if (!added && it->second != h) it->second = 0;
        }
    return out;
}

}  // namespace

TEST_CASE("over MPI, every ordered pair of 14 layouts at world 4 keeps the whole state bit for bit", "[elastic][mpi]") {
    auto world = mpi::world();
    REQUIRE(world.size() == 4);
    const auto layouts = world4_layouts();
    const auto walk = every_ordered_pair_walk(static_cast<int>(layouts.size()));
    auto first_options = options();
    first_options.partition = layouts[static_cast<std::size_t>(walk[0])].partition;
    mpi_engine engine(world, layouts[static_cast<std::size_t>(walk[0])].config(), model(), first_options);
    std::vector<std::string> failures;
    for (std::size_t i = 1; i < walk.size(); ++i) {
        if (!engine.is_spare()) engine.step(batch(static_cast<long long>(i)));
        const auto& to = layouts[static_cast<std::size_t>(walk[i])];
        const std::string pair = layouts[static_cast<std::size_t>(walk[i - 1])].name + " -> " + to.name;
        const auto before = fingerprint(engine, world);
        const auto report = engine.reconfigure(to.config(), {.partition = to.partition, .staging_bytes = 4096});
        const auto after = fingerprint(engine, world);
        bool consistent = !before.empty();
        for (const auto& [name, hash] : before) consistent = consistent && hash != 0;
        if (!consistent || before != after) failures.push_back(pair + ": the whole state changed");
        if (report.bytes_moved != report.lower_bound_bytes)
            failures.push_back(pair + ": moved " + std::to_string(report.bytes_moved) + " bytes, lower bound " +
                               std::to_string(report.lower_bound_bytes));
    }
    if (!engine.is_spare()) CHECK(std::isfinite(engine.step(batch(0)).loss));
    for (const auto& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
}
