// The README's usage example, compiled with the other examples so it cannot rot.
// Run it under mpirun (mpirun -np 4 ./quickstart) or alone for one rank.
#include <weft/weft.hpp>
#include <weft/comm/mpi.hpp>             // link weft::mpi
#include <weft/comm/mpi_environment.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    weft::comm::mpi_environment mpi(argc, argv);
    auto world = weft::comm::mpi::world();

    const weft::parallel_config layout({.pp = world.size(), .microbatches = 8,
                                        .schedule = weft::sched::one_f_one_b::kind,
                                        .world_size = world.size()});
    const weft::nn::mlp_config model{.input_dim = 32, .hidden_dim = 64, .num_blocks = 6, .num_classes = 8};

    weft::engine<weft::sched::any_of<weft::sched::gpipe, weft::sched::one_f_one_b>,
                 weft::shard::replicate, weft::comm::mpi, weft::exec::cpu>
        engine(world, layout, model, {.batch_size = 64, .optimizer = {.lr = 3e-3}});

    const weft::data::synthetic_dataset data(32, 8, /*seed=*/1);
    for (int step = 0; step < 20; ++step) {
        const auto stats = engine.step(data.batch(step, 64));
        if (world.rank() == 0) std::puts(weft::train::format_step(stats).c_str());
    }
}
