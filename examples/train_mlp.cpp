// examples/train_mlp: a pipelined training run of weft's MLP on a data set it generates
// deterministically, through run::trainer. Under mpirun it uses the MPI communicator, one
// rank per process; without mpirun, `--ranks N` runs N ranks as threads of this process.
//
//   mpirun -np 4 ./train_mlp --schedule 1f1b --pp 4 --microbatches 8 --steps 50
//   ./train_mlp --ranks 4 --schedule gpipe --pp 4 --microbatches 8 --steps 50 --checkpoint-dir ck
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "weft/weft.hpp"
#include "weft/run/launch.hpp"
#include "weft/run/options.hpp"
#include "weft/run/preemption.hpp"
#include "weft/run/trainer.hpp"

int main(int argc, char** argv) {
    CLI::App app{"Train weft's MLP with a pipeline schedule, over MPI (under mpirun) or threads (--ranks N)."};
    weft::run::settings o;
    o.steps = 50;
    o.batch = 64;
    o.microbatches = 8;
    o.lr = 3e-3;
    weft::run::mlp_sizes m;
    using namespace weft::run::options;
    weft::run::add_options(app, o, launch | layout | switches | training | nonfinite | checkpoints | weights | logs, m);
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;

    const weft::run::stop_on_signals stop_signals;
    const auto ranks = [&] {
        return weft::run::ranks_to_run("--pp x --dp x --tp", static_cast<long long>(o.pp) * o.dp * o.tp, o.ranks);
    };
    return weft::run::launch("train_mlp", argc, argv, ranks, [&]<class Comm>(Comm& world) {
        using engine = weft::engine<weft::sched::all_schedules, weft::shard::any_zero, Comm, weft::exec::cpu>;
        const weft::nn::mlp_config model{.input_dim = m.input_dim, .hidden_dim = m.hidden, .num_blocks = m.blocks,
                                         .num_classes = m.classes, .seed = o.seed};
        const weft::data::synthetic_dataset data(m.input_dim, m.classes, o.seed + 1);
        weft::run::trainer<engine>(world, o, model)
            .on_start([&](engine& e) {
                // --program: the file is the schedule.
                const std::string schedule = o.program.empty() ? "schedule " + o.schedule : "program " + o.program;
                if (world.rank() == 0)
                    std::printf("weft train_mlp | %s | pp %d | dp %d | microbatches %d | chunks %d | batch "
                                "%d | %d blocks of width %d\n",
                                schedule.c_str(), o.pp, o.dp, o.microbatches, e.config().chunks(), o.batch, m.blocks,
                                m.hidden);
            })
            .run([&](std::uint64_t i) { return data.batch(static_cast<long long>(i), o.batch); });
    });
}
