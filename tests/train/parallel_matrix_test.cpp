// The correctness matrix: GPT-2 trained under every factorization pp x dp x tp of the
// MPI world, every ZeRO stage and the schedules 1f1b, zb-h1 and interleaved must give
// the losses, global gradient norms, final weights and evaluated (validation) loss of one
// process, within 1e-5 relative, with the gradients clipped by that norm (tied wte
// counted once). Run under mpiexec
// with 1, 2, 4 and 8 ranks (8 oversubscribed on 2 cores): every rank computes the
// single-process reference itself, in-process, then joins each parallel run.
//
// WEFT_MATRIX_FILTER (optional): run only layouts whose name contains it, e.g. "zero3".
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "relative_difference.hpp"
#include "weft/comm/local.hpp"
#include "weft/comm/mpi.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/interleaved.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/models/gpt.hpp"

namespace {

using weft_test::relative_difference;

using schedules = weft::sched::any_of<weft::sched::one_f_one_b, weft::sched::zb_h1, weft::sched::interleaved>;
template <class Sharding, class Comm>
using gpt_engine = weft::train::engine<schedules, Sharding, Comm, weft::exec::cpu, weft::models::gpt>;

constexpr int steps = 2;
constexpr int batch_rows = 8;  // a multiple of dp * microbatches for every layout of 8 ranks
constexpr double clip_norm = 0.5;

// 14 layers: 16 units, enough for 8 ranks x 2 interleaved chunks. 8 heads so that every
// tensor-parallel degree up to 8 splits them.
weft::nn::gpt_config matrix_model() {
    return {.num_layers = 14, .d_model = 16, .num_heads = 8, .vocab_size = 32, .seq_len = 4, .seed = 5};
}

// SGD with momentum: its update is linear in the gradients, so reduction-order rounding
// stays at its own size and 1e-5 is a sharp bound. AdamW's sharded state is held to plain
// data parallelism bit for bit in engine_sharding_test.cpp; here its division by sqrt(v)
// would turn rounding noise on zero-gradient elements (the attention key bias) into
// lr-sized differences.
weft::train::engine_options matrix_options() {
    return {.batch_size = batch_rows,
            .optimizer = {.kind = weft::optim::optimizer_kind::sgd, .lr = 1e-1, .weight_decay = 0.1, .momentum = 0.9},
            // Small buckets, so that replicate's bucketing is exercised even on this model.
            .bucket_elements = 1000,
            // Below the first steps' norms (checked below): the update depends on the exact norm.
            .grad_clip = clip_norm};
}

weft::data::token_batch matrix_batch(int step) {
    const auto model = matrix_model();
    weft::data::token_batch b{batch_rows, model.seq_len, {}, {}};
    for (int i = 0; i < batch_rows * model.seq_len; ++i) {
        b.inputs.push_back((i * 7 + step * 3 + i / 5) % model.vocab_size);
        b.targets.push_back((i * 11 + step * 5 + 1) % model.vocab_size);
    }
    return b;
}

struct training {
    std::vector<double> losses;
    std::vector<double> grad_norms;
    double evaluated = 0;  // evaluate() on the next batch after training
    std::map<std::string, std::vector<float>> tensors;  // full tensors of this rank's stages
    weft::train::memory_report memory{};
};

template <class Engine>
training train(Engine& engine) {
    training out;
    for (int step = 0; step < steps; ++step) {
        const auto stats = engine.step(matrix_batch(step));
        out.losses.push_back(stats.loss);
        out.grad_norms.push_back(stats.grad_norm);
    }
    out.evaluated = engine.evaluate(matrix_batch(steps));
    for (const auto& full : weft::train::gather_full_stages(engine)) {
        for (const auto& info : full.registry.entries())
            out.tensors[info.name].assign(
                full.parameters.begin() + static_cast<std::ptrdiff_t>(info.offset),
                full.parameters.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
    }
    out.memory = engine.memory();
    return out;
}

// One process, one micro-batch over the whole batch: the textbook run.
const training& reference() {
    static const training result = [] {
        training r;
        weft::comm::local::run(1, [&](weft::comm::local& world) {
            gpt_engine<weft::shard::replicate, weft::comm::local> engine(
                world, weft::parallel_config({.microbatches = 1}), matrix_model(), matrix_options());
            r = train(engine);
        });
        return r;
    }();
    return result;
}

struct layout {
    int pp, dp, tp, zero;
    weft::schedule_kind schedule;
    [[nodiscard]] int chunks() const { return schedule == weft::sched::interleaved::kind ? 2 : 1; }
    [[nodiscard]] std::string name() const {
        return "pp" + std::to_string(pp) + " dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " zero" +
               std::to_string(zero) + " " + std::string(weft::to_string(schedule));
    }
};

std::vector<layout> layouts_of(int world) {
    std::vector<layout> out;
    const char* filter = std::getenv("WEFT_MATRIX_FILTER");
    for (int pp = 1; pp <= world; ++pp)
        for (int dp = 1; pp * dp <= world; ++dp) {
            if (world % (pp * dp) != 0) continue;
            const int tp = world / (pp * dp);
            for (int zero = 0; zero <= 3; ++zero)
                for (const auto schedule :
                     {weft::sched::one_f_one_b::kind, weft::sched::zb_h1::kind, weft::sched::interleaved::kind}) {
                    const layout l{pp, dp, tp, zero, schedule};
                    if (filter == nullptr || l.name().find(filter) != std::string::npos) out.push_back(l);
                }
        }
    return out;
}

// shard::any_zero: one engine type for every ZeRO stage (engine_sharding_test.cpp runs
// the typed policies).
training train_layout(weft::comm::mpi& world, const layout& l) {
    const weft::parallel_config config({.pp = l.pp,
                                        .dp = l.dp,
                                        .tp = l.tp,
                                        .zero_stage = l.zero,
                                        .microbatches = l.pp,
                                        .chunks = l.chunks(),
                                        .schedule = l.schedule,
                                        .world_size = world.size()});
    gpt_engine<weft::shard::any_zero, weft::comm::mpi> engine(world, config, matrix_model(), matrix_options());
    return train(engine);
}

// One line per layout on rank 0: the differences, and the largest per-rank memory.
void report(weft::comm::mpi& world, const layout& l, const double (&worst)[2], const weft::train::memory_report& m) {
    const double mine[5] = {double(m.between_steps.parameters), double(m.between_steps.gradients),
                            double(m.between_steps.optimizer_state), double(m.peak.total()),
                            double(m.peak_activations)};
    std::vector<double> all(5 * static_cast<std::size_t>(world.size()));
    world.allgather(std::span<const double>(mine), std::span<double>(all));
    if (world.rank() != 0) return;
    double most[5] = {};
    for (int r = 0; r < world.size(); ++r)
        for (int i = 0; i < 5; ++i) most[i] = std::max(most[i], all[5 * std::size_t(r) + std::size_t(i)]);
    std::printf(
        "%-34s loss/norm %.1e weights %.1e | per rank max KiB: params %6.1f grads %6.1f optimizer %6.1f "
        "state peak %6.1f activations %6.1f\n",
        (std::to_string(world.size()) + " ranks " + l.name()).c_str(), worst[0], worst[1], most[0] / 1024,
        most[1] / 1024, most[2] / 1024, most[3] / 1024, most[4] / 1024);
}

}  // namespace

TEST_CASE("every layout, ZeRO stage and schedule trains the single-process model", "[train][mpi][matrix]") {
    auto world = weft::comm::mpi::world();
    const training& ref = reference();
    INFO("reference gradient norms " << ref.grad_norms[0] << ", " << ref.grad_norms[1]);
    REQUIRE(ref.grad_norms[0] > clip_norm);  // so clipping is exercised
    const auto layouts = layouts_of(world.size());
    REQUIRE(!layouts.empty());
    for (const auto& l : layouts) {
        INFO("world " << world.size() << ": " << l.name());
        const training run = train_layout(world, l);
        // Worst relative error over this rank's tensors, then over every rank.
        double worst_loss = 0;
        for (int s = 0; s < steps; ++s) {
            worst_loss = std::max(worst_loss, std::abs(run.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]));
            worst_loss =
                std::max(worst_loss, std::abs(run.grad_norms[s] - ref.grad_norms[s]) / std::abs(ref.grad_norms[s]));
        }
        worst_loss = std::max(worst_loss, std::abs(run.evaluated - ref.evaluated) / std::abs(ref.evaluated));
        double worst_weight = 0;
        std::string worst_name;
        for (const auto& [name, values] : run.tensors) {
            const double d = relative_difference(values, ref.tensors.at(name));
            if (d > worst_weight) {
                worst_weight = d;
                worst_name = name;
            }
        }
        double worst[2] = {worst_loss, worst_weight};
        std::vector<double> all(2 * static_cast<std::size_t>(world.size()));
        world.allgather(std::span<const double>(worst), std::span<double>(all));
        for (int r = 0; r < world.size(); ++r) {
            worst[0] = std::max(worst[0], all[2 * std::size_t(r)]);
            worst[1] = std::max(worst[1], all[2 * std::size_t(r) + 1]);
        }
        INFO("worst loss or norm difference " << worst[0] << ", worst tensor difference " << worst[1]
                                      << " (this rank: " << worst_name << ")");
        report(world, l, worst, run.memory);
        CHECK(worst[0] <= 1e-5);
        CHECK(worst[1] <= 1e-5);
        CHECK(!run.tensors.empty());
    }
}
