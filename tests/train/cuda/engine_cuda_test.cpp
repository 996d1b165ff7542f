// weft::engine over exec::cuda: the same engine, schedules and sharding as on the CPU, the
// GPU computing. A small GPT-2 trains a few steps on one GPU, and on rank threads sharing
// that GPU over comm::host_staged<comm::local> (pp=2 under zb-h1; dp=2 under ZeRO-1; tp=2;
// pp=2 x tp=2). Each run's losses match the CPU engine's within bf16 rounding (exec::cuda's
// activations are bf16, its GEMMs read bf16 weights), and the rank-thread layouts, which move
// the same bf16 activations between ranks, match the one-GPU run. With NCCL, the engine also
// runs over comm::nccl (one rank: stream-ordered waits, host scalars staged through the
// device, the grid's splits, ZeRO's gathers through NCCL) and matches comm::host_staged.
// With CUDA graphs per action (exec::cuda::enable_action_graphs) pp=1, pp=2 zb-h1 and dp=2
// ZeRO-1 repeat their eager losses bit for bit, and so does pp=2 zb-h1 with an evaluation
// (forwards only, sharing the training's F graphs) after each step.
// Exit 77 (skipped) without a GPU.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device_check.hpp"
#include "weft/comm/cuda/host_staged.hpp"
#if defined(WEFT_HAS_NCCL)
#include "weft/comm/nccl.hpp"
#endif
#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/exec/cuda.hpp"
#include "weft/models/gpt.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/engine.hpp"

namespace {

using schedules = weft::sched::any_of<weft::sched::gpipe, weft::sched::zb_h1>;
using staged_local = weft::comm::host_staged<weft::comm::local>;
using cpu_engine = weft::engine<schedules, weft::shard::any_zero, weft::comm::local, weft::exec::cpu, weft::models::gpt>;
using gpu_engine = weft::engine<schedules, weft::shard::any_zero, staged_local, weft::exec::cuda, weft::models::gpt>;

constexpr int steps = 5;
constexpr int batch = 8;

weft::nn::gpt_config model() {
    // Head size 32: the smallest the attention kernel takes.
    return {.num_layers = 2, .d_model = 64, .num_heads = 2, .vocab_size = 256, .seq_len = 32, .seed = 7};
}

weft::train::engine_options options() {
    weft::train::engine_options o;
    o.batch_size = batch;
    o.optimizer.kind = weft::optim::optimizer_kind::adamw;
    o.optimizer.lr = 1e-3;
    return o;
}

// Step s's batch: deterministic tokens, targets the next token.
weft::data::token_batch batch_of(int step) {
    const auto c = model();
    weft::data::token_batch b{.rows = batch, .seq_len = c.seq_len, .inputs = {}, .targets = {}};
    for (int i = 0; i < batch * c.seq_len; ++i) {
        const auto token = [&](int k) { return std::int32_t((k * 37 + step * 11 + (k / 5) * 3) % c.vocab_size); };
        b.inputs.push_back(token(i));
        b.targets.push_back(token(i + 1));
    }
    return b;
}

weft::parallel_config layout(int pp, int dp, int zero, weft::schedule_kind schedule, int tp = 1) {
    return weft::parallel_config({.pp = pp,
                                  .dp = dp,
                                  .tp = tp,
                                  .zero_stage = zero,
                                  .microbatches = 4,
                                  .schedule = schedule,
                                  .world_size = pp * dp * tp});
}

// The losses of `steps` steps (rank 0's; every rank reports the same). With `graph_launches`
// > 0, each rank's backend records its actions into CUDA graphs and must have launched that
// many: every action of every step from the second on. With `evaluate`, each step is followed
// by a validation loss on another batch, appended after the step's loss.
template <class Engine, class Comm, class Backend>
std::vector<double> train(int ranks, const weft::parallel_config& config, bool check_state_memory,
                          std::size_t graph_launches = 0, bool evaluate = false) {
    std::vector<double> losses;
    std::mutex lock;
    weft::comm::local::run(ranks, [&](weft::comm::local& world) {
        Comm comm = [&] {
            if constexpr (std::is_same_v<Comm, weft::comm::local>)
                return std::move(world);
            else
                return Comm(std::move(world));
        }();
        Backend backend{};
        if constexpr (requires { backend.enable_action_graphs(); })
            backend.enable_action_graphs(graph_launches > 0);
        Engine engine(comm, config, model(), options(), std::move(backend));
        if (check_state_memory && comm.rank() == 0) {
            const auto allocator = engine.parts().state().stages.at(0).tensors.full.parameter_storage().get_allocator();
            const auto& memory = allocator.memory();
            weft_test::expect(memory.name == "CUDA managed", "the training state is in CUDA managed memory, not " +
                                                                 std::string(memory.name));
        }
        std::vector<double> mine;
        for (int s = 0; s < steps; ++s) {
            mine.push_back(engine.step(batch_of(s)).loss);
            if (evaluate) mine.push_back(engine.evaluate(batch_of(1000 + s)));
        }
        if constexpr (requires { engine.backend().action_graph_launches(); })
            if (graph_launches > 0)
                weft_test::expect(engine.backend().action_graph_launches() == graph_launches,
                                  "rank " + std::to_string(comm.rank()) + " launched " +
                                      std::to_string(engine.backend().action_graph_launches()) +
                                      " action graphs, expected " + std::to_string(graph_launches));
        if (comm.rank() == 0) {
            const std::lock_guard guard(lock);
            losses = mine;
        }
    });
    return losses;
}

#if defined(WEFT_HAS_NCCL)
using nccl_engine = weft::engine<schedules, weft::shard::any_zero, weft::comm::nccl, weft::exec::cuda, weft::models::gpt>;

// The losses of `steps` steps of a one-rank engine over comm::nccl on device 0.
std::vector<double> train_over_nccl(const weft::parallel_config& config) {
    weft::comm::nccl world = weft::comm::nccl::single(0);
    nccl_engine engine(world, config, model(), options(), weft::exec::cuda{});
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(engine.step(batch_of(s)).loss);
    return losses;
}
#endif

void expect_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                  double tolerance) {
    bool ok = got.size() == want.size();
    for (std::size_t i = 0; ok && i < got.size(); ++i) ok = std::fabs(got[i] - want[i]) <= tolerance;
    std::string values;
    for (std::size_t i = 0; i < got.size() && i < want.size(); ++i)
        values += " " + std::to_string(got[i]) + "/" + std::to_string(want[i]);
    std::printf("%s:%s\n", what.c_str(), values.c_str());
    weft_test::expect(ok, what + " within " + std::to_string(tolerance) + ":" + values);
}

void device_checks() {
    const auto gpipe = weft::sched::gpipe::kind, zb_h1 = weft::sched::zb_h1::kind;
    const auto cpu = train<cpu_engine, weft::comm::local, weft::exec::cpu>(1, layout(1, 1, 0, gpipe), false);
    const auto gpu = train<gpu_engine, staged_local, weft::exec::cuda>(1, layout(1, 1, 0, gpipe), true);
    expect_close("pp=1 on the GPU against the CPU (loss per step)", gpu, cpu, 2e-2);
    weft_test::expect(gpu.back() < gpu.front(), "the GPU run's loss falls");
    const auto pipelined = train<gpu_engine, staged_local, weft::exec::cuda>(2, layout(2, 1, 0, zb_h1), false);
    expect_close("pp=2 zb-h1 on two rank threads against pp=1, both on the GPU", pipelined, gpu, 5e-3);
    const auto sharded = train<gpu_engine, staged_local, weft::exec::cuda>(2, layout(1, 2, 1, gpipe), false);
    expect_close("dp=2 ZeRO-1 on two rank threads against pp=1, both on the GPU", sharded, gpu, 5e-3);
    // CUDA graphs per action replay the eager kernels in their order: the same losses, bit for
    // bit. pp=1 gpipe: F and B of 4 micro-batches a step; pp=2 zb-h1: F, I and W on each rank;
    // dp=2 ZeRO-1: F and B on each replica.
    const std::size_t replayed_steps = steps - 1;
    const auto graphed = train<gpu_engine, staged_local, weft::exec::cuda>(1, layout(1, 1, 0, gpipe), false,
                                                                           replayed_steps * 2 * 4);
    expect_close("pp=1 with CUDA graphs per action against pp=1 eager", graphed, gpu, 0.0);
    const auto graphed_pp2 = train<gpu_engine, staged_local, weft::exec::cuda>(2, layout(2, 1, 0, zb_h1), false,
                                                                               replayed_steps * 3 * 4);
    expect_close("pp=2 zb-h1 with CUDA graphs per action against pp=2 eager", graphed_pp2, pipelined, 0.0);
    const auto graphed_zero1 = train<gpu_engine, staged_local, weft::exec::cuda>(2, layout(1, 2, 1, gpipe), false,
                                                                                 replayed_steps * 2 * 4);
    expect_close("dp=2 ZeRO-1 with CUDA graphs per action against dp=2 eager", graphed_zero1, sharded, 0.0);
    // An evaluation after each step runs the training's F actions (same keys) and drops their
    // activations outside any graph: the same losses and validation losses as eager, and each
    // rank launches its F graphs twice a step from the first evaluation on.
    const auto evaluated = train<gpu_engine, staged_local, weft::exec::cuda>(2, layout(2, 1, 0, zb_h1), false, 0,
                                                                             true);
    const auto graphed_evaluated = train<gpu_engine, staged_local, weft::exec::cuda>(
        2, layout(2, 1, 0, zb_h1), false, (2 * steps - 1) * 4 + replayed_steps * 2 * 4, true);
    expect_close("pp=2 zb-h1 with graphs and an evaluation after each step against eager", graphed_evaluated,
                 evaluated, 0.0);
    std::vector<double> trained_only;
    for (std::size_t i = 0; i < evaluated.size(); i += 2) trained_only.push_back(evaluated[i]);
    expect_close("pp=2 zb-h1's losses with evaluations against without", trained_only, pipelined, 0.0);
    // Tensor parallelism sums bf16 partial products in fp32 on the host and rounds once, where
    // one GPU rounds each whole product: bf16 rounding at other points, a looser bound.
    const auto split = train<gpu_engine, staged_local, weft::exec::cuda>(2, layout(1, 1, 0, gpipe, 2), false);
    expect_close("tp=2 on two rank threads against pp=1, both on the GPU", split, gpu, 1e-2);
    const auto both = train<gpu_engine, staged_local, weft::exec::cuda>(4, layout(2, 1, 0, zb_h1, 2), false);
    expect_close("pp=2 x tp=2 zb-h1 on four rank threads against pp=1, both on the GPU", both, gpu, 1e-2);
#if defined(WEFT_HAS_NCCL)
    // One NCCL rank sums nothing: the same numbers as host staging, up to the kernels' own
    // run-to-run differences.
    for (const int zero : {0, 1, 3}) {
        const auto staged = train<gpu_engine, staged_local, weft::exec::cuda>(1, layout(1, 1, zero, gpipe), false);
        expect_close("ZeRO-" + std::to_string(zero) + " over comm::nccl (one rank) against comm::host_staged",
                     train_over_nccl(layout(1, 1, zero, gpipe)), staged, 1e-5);
    }
#endif
}

}  // namespace

int main(int argc, char** argv) {
    return weft_test::run_device_test(
        argc, argv, {"engine"}, [] { weft_test::expect(weft::compute_backend<weft::exec::cuda>, "exec::cuda"); },
        [](std::string_view) { device_checks(); });
}
