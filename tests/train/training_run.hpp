// Shared by the engine tests of every backend: runs a few training steps of the
// MLP under a given layout and collects what the numerical-truth checks compare,
// and the single-process references they compare against.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cpu_backends.hpp"
#include "relative_difference.hpp"
#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/mlp.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"
#include "weft/data/synthetic_dataset.hpp"

namespace weft_test {

using all_schedules = weft::sched::all_schedules;

inline constexpr int steps = 5;
inline constexpr int batch_size = 16;

inline weft::nn::mlp_config test_model() {
    // 8 units: enough for 4 ranks x 2 chunks.
    return {.input_dim = 6, .hidden_dim = 8, .num_blocks = 6, .num_classes = 4, .seed = 99};
}

inline weft::train::engine_options test_options() {
    return {.batch_size = batch_size, .optimizer = {.kind = weft::optim::optimizer_kind::adamw, .lr = 1e-2,
                                                    .weight_decay = 0.1}};
}

struct run_result {
    std::vector<double> losses;                            // every rank sees every step's loss
    std::map<std::string, std::vector<float>> parameters;  // tensors of the stages this rank ran
    std::size_t peak_stashed = 0;
};

// Trains `steps` steps; with `program`, runs that compute-only program instead of
// generating config.schedule().
template <weft::communicator Comm>
run_result train_steps(Comm& world, const weft::parallel_config& config,
                       const weft::sched::program* program = nullptr) {
    using engine_t = weft::train::engine<all_schedules, weft::shard::replicate, Comm, weft::exec::cpu>;
    engine_t engine = program ? engine_t(world, config, test_model(), test_options(), *program)
                              : engine_t(world, config, test_model(), test_options());
    const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
    run_result result;
    for (int step = 0; step < steps; ++step) result.losses.push_back(engine.step(data.batch(step, batch_size)).loss);
    result.peak_stashed = engine.parts().peak_stashed();
    for (const int s : engine.parts().local_stages()) {
        const auto& stage = engine.parts().stage(s);
        const auto params = stage.parameters();
        for (const auto& info : stage.registry().entries())
            result.parameters[info.name].assign(params.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                                params.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
    }
    return result;
}

// Runs `config.world_size()` ranks as threads; rank r's result is in slot r.
inline std::vector<run_result> run_local(const weft::parallel_config& config) {
    std::vector<run_result> results(static_cast<std::size_t>(config.world_size()));
    weft::comm::local::run(config.world_size(), [&](weft::comm::local& world) {
        results[static_cast<std::size_t>(world.rank())] = train_steps(world, config);
    });
    return results;
}

// The engine on one rank: pp = dp = 1 with the same micro-batches.
inline run_result single_process_run(int microbatches) {
    run_result result;
    weft::comm::local::run(1, [&](weft::comm::local& world) {
        result = train_steps(world, weft::parallel_config({.microbatches = microbatches,
                                                           .schedule = weft::sched::gpipe::kind}));
    });
    return result;
}

// No engine, no micro-batches: the whole batch through one stage holding the whole
// model, the textbook loop. Checks that the engine trains the model, not just itself.
inline run_result plain_loop_run() {
    const auto model = test_model();
    weft::nn::mlp_stage<weft::exec::cpu> stage(cpu, model, {0, model.num_units()});
    weft::optim::adamw optimizer({.lr = 1e-2, .weight_decay = 0.1});
    const weft::data::synthetic_dataset data(model.input_dim, model.num_classes, 7);
    run_result result;
    for (int step = 0; step < steps; ++step) {
        const auto batch = data.batch(step, batch_size);
        const weft::exec::cpu::matrix x =
            Eigen::Map<const weft::exec::cpu::matrix>(batch.inputs.data(), batch.rows, batch.input_dim);
        weft::nn::mlp_stage<weft::exec::cpu>::stash stash;
        const auto logits = stage.forward(x, stash);
        const auto loss = weft::nn::cross_entropy(cpu, logits, batch.labels, 1.0f);
        static_cast<void>(stage.backward_input(loss.dlogits, stash));  // the first stage's input grad is unused
        stage.backward_weight(stash);
        optimizer.step(stage.parameters(), stage.gradients(), stage.registry());
        stage.zero_gradients();
        result.losses.push_back(loss.loss);
    }
    const auto params = stage.parameters();
    for (const auto& info : stage.registry().entries())
        result.parameters[info.name].assign(params.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                            params.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
    return result;
}


// Every tensor `run` holds equals the reference's within `tolerance` (relative, per
// tensor; 0 asks for bit-exact), and so does every step's loss.
inline void require_same_training(const run_result& run, const run_result& reference, double tolerance) {
    REQUIRE(run.losses.size() == reference.losses.size());
    for (std::size_t i = 0; i < run.losses.size(); ++i) {
        INFO("step " << i << ": loss " << run.losses[i] << " vs reference " << reference.losses[i]);
        if (tolerance == 0)
            CHECK(run.losses[i] == reference.losses[i]);
        else
            CHECK(std::abs(run.losses[i] - reference.losses[i]) <= tolerance * std::abs(reference.losses[i]));
    }
    REQUIRE_FALSE(run.parameters.empty());
    for (const auto& [name, values] : run.parameters) {
        INFO("tensor " << name);
        const auto it = reference.parameters.find(name);
        REQUIRE(it != reference.parameters.end());
        REQUIRE(values.size() == it->second.size());
        if (tolerance == 0)
            CHECK(values == it->second);
        else
            CHECK(relative_difference(values, it->second) <= tolerance);
    }
}

}  // namespace weft_test
