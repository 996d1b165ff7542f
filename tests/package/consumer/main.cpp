// Uses a little of everything a user reaches for first: a config, a schedule and
// the in-process communicator. Exits non-zero if any of it misbehaves.
#include <weft/weft.hpp>

#include <cstdio>

int main() {
    const weft::parallel_config config({.pp = 4, .microbatches = 8, .world_size = 4});
    const auto program = weft::sched::lower(weft::sched::one_f_one_b::generate(config.pp(), config.microbatches()));
    if (!weft::sched::valid(program)) return 1;
    double total = 0;
    weft::comm::local::run(2, [&](weft::comm::local& comm) {
        double value[1] = {1.0 + comm.rank()};
        comm.allreduce_sum(std::span<double>(value));
        if (comm.rank() == 0) total = value[0];
    });
    std::printf("weft consumer: %zu actions on rank 0, allreduce %.1f\n", program.ranks[0].size(), total);
    return total == 3.0 ? 0 : 1;
}
