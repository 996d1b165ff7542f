// An HPC code training a model of its own data through weft::run::trainer (docs/own_model.md
// shows this file whole): its solver makes the samples, weft's MLP learns them, and the
// trainer brings the lr schedule, checkpoints, resume and preemption. mpirun -np 2, or threads.
#include <cmath>
#include <cstdint>
#include <filesystem>

#include "weft/weft.hpp"
#include "weft/run/launch.hpp"
#include "weft/run/preemption.hpp"
#include "weft/run/trainer.hpp"

// The code's own data: five cells of a wave field around a moving point, labelled by whether
// the middle cell heats, cools or holds (the sign of the discrete Laplacian).
weft::data::classification_batch stencils(std::uint64_t index, int rows) {
    weft::data::classification_batch b{rows, 5, {}, {}};
    for (int r = 0; r < rows; ++r) {
        const double x = 0.37 * static_cast<double>(index * rows + r);
        for (int k = -2; k <= 2; ++k) b.inputs.push_back(float(std::sin(x + 0.5 * k) + 0.3 * std::sin(3.1 * x + k)));
        const float* u = &b.inputs[5 * r];
        const double laplacian = u[1] - 2 * u[2] + u[3];
        b.labels.push_back(laplacian > 0.05 ? 0 : laplacian < -0.05 ? 1 : 2);
    }
    return b;
}

int main(int argc, char** argv) {
    weft::run::settings s;  // every policy of the run is a value; run/options.hpp puts them on a CLI
    s.pp = 2;
    s.microbatches = 4;
    s.batch = 32;
    s.steps = 30;
    s.lr = 3e-3;
    s.warmup_steps = 5;
    s.min_lr = 3e-4;
    if (argc > 1) s.checkpoint_dir = argv[1];  // saved at the end and on SIGTERM; a rerun resumes
    if (argc > 1 && std::filesystem::exists(s.checkpoint_dir + "/latest")) s.resume = s.checkpoint_dir;
    const weft::nn::mlp_config model{.input_dim = 5, .hidden_dim = 32, .num_blocks = 2, .num_classes = 3};
    const weft::run::stop_on_signals preemption;
    return weft::run::launch("train_own_model", argc, argv, [&] { return weft::run::ranks_to_run("--pp", s.pp, 0); },
                             [&]<class Comm>(Comm& world) {
                                 using engine = weft::engine<weft::sched::one_f_one_b, weft::shard::replicate, Comm,
                                                             weft::exec::cpu>;
                                 weft::run::trainer<engine>(world, s, model).run([&](std::uint64_t i) {
                                     return stencils(i, s.batch);
                                 });
                             });
}
