// CPU speed of one whole GPT-2 training step (forward, backward_input, backward_weight, AdamW)
// on a single stage holding every unit, next to the time of the same step's GEMMs alone and
// to PyTorch's CPU step for the same config measured in the same run (tests/reference/gpt_step_torch.py).
// Usage: bench_step [--json] [--threads N] [--steps N] [--config small|big|all] [--no-torch]
//                   [--python PATH] [--torch-script PATH] [--default-heap]
//        mpirun -np 2 bench_step --parallel [--steps N] [--json] [--schedule NAME,NAME...]
// --default-heap skips exec::retain_freed_memory(), which train_gpt calls, to show its effect.
// --parallel times the whole engine step (small config) at one rank, at pp=2 and at dp=2 over
// MPI for every schedule that runs on 2 pipeline ranks (built where MPI is found).
// Goals (step/GEMM <= 1.15, PyTorch/weft >= 1.5) and speed-ups are reported, never asserted.
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/exec/cpu_heap.hpp"
#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/nn/token_view.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/train/mfu.hpp"
#if WEFT_HAS_MPI
#include <mpi.h>

#include <thread>

#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_environment.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"
#include "weft/models/gpt.hpp"
#include "weft/data/token_batches.hpp"
#endif

#ifndef WEFT_SOURCE_DIR
#define WEFT_SOURCE_DIR "."
#endif

namespace {

using backend = weft::exec::cpu;
using matrix = backend::matrix;
using scalar = backend::scalar;
using clock_type = std::chrono::steady_clock;

struct bench_config {
    const char* name;
    int layers, d_model, heads, vocab, seq_len, batch;
    int warmup, steps;  // timed steps; the median is reported
};

// Byte-level vocabulary (256), as make_dataset's tokens: the head is then a small share of
// the step, as it is for GPT-2's 50257 only at far larger d_model. Batches sized so one weft
// step takes about 0.1-3 s on one core.
const bench_config configs[] = {
    {"small", 4, 256, 4, 256, 128, 4, 2, 10},
    {"big", 12, 768, 12, 256, 256, 1, 1, 3},
};

double seconds_since(clock_type::time_point start) {
    return std::chrono::duration<double>(clock_type::now() - start).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct phases {
    double forward = 0, loss = 0, backward_input = 0, backward_weight = 0, optimizer = 0, step = 0;
};

// ---- weft's step -------------------------------------------------------------------------

struct weft_result {
    phases median;  // each phase's median on its own; `step` is the median whole step
    std::int64_t parameters = 0;
    double loss = 0;
};

weft_result time_weft(const bench_config& c, weft::nn::gpt_stage<backend>& stage) {
    std::mt19937 rng(1);
    std::vector<std::int32_t> inputs(std::size_t(c.batch) * c.seq_len), targets(inputs.size());
    for (auto& t : inputs) t = std::int32_t(rng() % unsigned(c.vocab));
    for (auto& t : targets) t = std::int32_t(rng() % unsigned(c.vocab));
    weft::optim::adamw optimizer({.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
    const weft::nn::token_view view{inputs, c.batch, c.seq_len};

    std::vector<phases> runs;
    weft_result result;
    for (int step = 0; step < c.warmup + c.steps; ++step) {
        phases p;
        const auto start = clock_type::now();
        auto t = start;
        auto lap = [&t](double& into) {
            const auto now = clock_type::now();
            into = std::chrono::duration<double>(now - t).count();
            t = now;
        };
        stage.zero_gradients();
        weft::nn::gpt_stage<backend>::stash stash;
        const matrix logits = stage.forward(view, stash);
        lap(p.forward);
        auto ce = weft::nn::cross_entropy(stage.backend(), logits, targets, scalar(1));
        lap(p.loss);
        const matrix dx = stage.backward_input(std::move(ce.dlogits), stash);
        lap(p.backward_input);
        stage.backward_weight(stash);
        lap(p.backward_weight);
        optimizer.step(stage.parameters(), stage.gradients(), stage.registry());
        lap(p.optimizer);
        p.step = seconds_since(start);
        result.loss = ce.loss;
        if (step >= c.warmup) runs.push_back(p);
    }
    auto med = [&runs](double phases::*field) {
        std::vector<double> v;
        for (const auto& r : runs) v.push_back(r.*field);
        return median(v);
    };
    result.median = {med(&phases::forward), med(&phases::loss), med(&phases::backward_input),
                     med(&phases::backward_weight), med(&phases::optimizer), med(&phases::step)};
    result.parameters = std::int64_t(stage.parameters().size());
    return result;
}

// ---- The same step's GEMMs alone ---------------------------------------------------------
// Exactly the products the CPU kernels evaluate (exec/cpu.hpp), same shapes, same Eigen
// expressions, on the stage's own weight buffers; everything else (bias adds, LayerNorm, GELU,
// softmax, residual adds, gradient accumulation, allocation, the optimizer) is left out.

struct gemm_step {
    using const_map = Eigen::Map<const matrix>;
    const bench_config& c;
    weft::nn::gpt_stage<backend>& stage;
    Eigen::Index m, width, t, d;
    matrix x, x4, qkv, probs, ds, y, y3, y4, g, g3, g4, dqkv, logits, dlogits, att;

    gemm_step(const bench_config& cfg, weft::nn::gpt_stage<backend>& s)
        : c(cfg), stage(s), m(Eigen::Index(cfg.batch) * cfg.seq_len), width(cfg.d_model), t(cfg.seq_len),
          d(cfg.d_model / cfg.heads) {
        x = matrix::Random(m, width);
        x4 = matrix::Random(m, 4 * width);
        qkv = matrix::Random(m, 3 * width);
        g = matrix::Random(m, width);
        g3 = matrix::Random(m, 3 * width);
        g4 = matrix::Random(m, 4 * width);
        dlogits = matrix::Random(m, c.vocab);
        probs = matrix::Random(Eigen::Index(c.batch) * c.heads * t, t);
        probs.triangularView<Eigen::StrictlyUpper>().setZero();
        ds.resize(t, t);
        att.resize(m, width);
        dqkv.resize(m, 3 * width);
    }

    const_map weight(const std::string& name, Eigen::Index in, Eigen::Index out) const {
        const auto& info = stage.registry().find(name);
        return const_map(stage.parameters().data() + info.offset, in, out);
    }

    // linear_forward, linear_backward_input, linear_backward_weight (products only).
    void linear(const matrix& in, const const_map& w, const matrix& dy) {
        matrix out = in * w;
        matrix dx = dy * w.transpose();
        const matrix dw = in.transpose() * dy;
        sink += out(0, 0) + dx(0, 0) + dw(0, 0);
    }

    void attention() {
        const Eigen::Index heads = c.heads;
        for (Eigen::Index b = 0; b < c.batch; ++b)
            for (Eigen::Index h = 0; h < heads; ++h) {
                const auto q = qkv.block(b * t, h * d, t, d);
                const auto k = qkv.block(b * t, width + h * d, t, d);
                const auto v = qkv.block(b * t, 2 * width + h * d, t, d);
                auto p = probs.block((b * heads + h) * t, 0, t, t);
                const auto gy = g.block(b * t, h * d, t, d);
                // causal_attention_forward
                p.template triangularView<Eigen::Lower>() = scalar(0.125) * (q * k.transpose());
                att.block(b * t, h * d, t, d).noalias() = p.template triangularView<Eigen::Lower>() * v;
                // causal_attention_backward
                dqkv.block(b * t, 2 * width + h * d, t, d).noalias() =
                    p.transpose().template triangularView<Eigen::Upper>() * gy;
                ds.template triangularView<Eigen::Lower>() = gy * v.transpose();
                dqkv.block(b * t, h * d, t, d).noalias() = ds.template triangularView<Eigen::Lower>() * k;
                dqkv.block(b * t, width + h * d, t, d).noalias() =
                    ds.transpose().template triangularView<Eigen::Upper>() * q;
            }
        sink += att(0, 0) + dqkv(0, 0);
    }

    double run() {
        const auto start = clock_type::now();
        for (int l = 0; l < c.layers; ++l) {
            const std::string h = "h." + std::to_string(l) + ".";
            linear(x, weight(h + "attn.c_attn.weight", width, 3 * width), g3);
            attention();
            linear(x, weight(h + "attn.c_proj.weight", width, width), g);
            linear(x, weight(h + "mlp.c_fc.weight", width, 4 * width), g4);
            linear(x4, weight(h + "mlp.c_proj.weight", 4 * width, width), g);
        }
        // The tied head: transposed_linear_forward / _backward_input / _backward_weight.
        const const_map wte = weight("wte.weight", c.vocab, width);
        logits.resize(m, c.vocab);
        logits.noalias() = x * wte.transpose();
        matrix dx(m, width);
        dx.noalias() = dlogits * wte;
        matrix dw(c.vocab, width);
        dw.noalias() = dlogits.transpose() * x;
        sink += logits(0, 0) + dx(0, 0) + dw(0, 0);
        return seconds_since(start);
    }

    scalar sink = 0;  // keeps the products observable
};

double time_gemms(const bench_config& c, weft::nn::gpt_stage<backend>& stage) {
    gemm_step gemms(c, stage);
    std::vector<double> runs;
    for (int step = 0; step < c.warmup + c.steps; ++step) {
        const double s = gemms.run();
        if (step >= c.warmup) runs.push_back(s);
    }
    volatile scalar keep = gemms.sink;  // so the optimizer cannot drop the products
    (void)keep;
    return median(runs);
}

// ---- PyTorch, in the same run ------------------------------------------------------------

// The PyTorch version that ran, from the script's JSON line ("torch": "2.5.1"), for the table.
std::string torch_version;

// `text` as one word for /bin/sh: in single quotes, a quote inside closed, escaped, reopened.
std::string shell_word(const std::string& text) {
    std::string quoted = "'";
    for (const char ch : text) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return quoted + "'";
}

std::optional<double> time_torch(const bench_config& c, int threads, const std::string& python,
                                 const std::string& script) {
    const std::string command =
        shell_word(python) + " " + shell_word(script) + " --layers " + std::to_string(c.layers) + " --d-model " +
        std::to_string(c.d_model) + " --heads " + std::to_string(c.heads) + " --vocab " + std::to_string(c.vocab) +
        " --seq-len " + std::to_string(c.seq_len) + " --batch " + std::to_string(c.batch) + " --threads " +
        std::to_string(threads) + " --warmup " + std::to_string(c.warmup) + " --steps " + std::to_string(c.steps) +
        " 2>/dev/null";
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return std::nullopt;
    std::string out;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    if (pclose(pipe) != 0) return std::nullopt;
    const auto key = out.rfind("\"median_ms\": ");
    if (key == std::string::npos) return std::nullopt;
    const auto version = out.rfind("\"torch\": \"");
    if (version != std::string::npos) {
        const auto first = version + 10;
        torch_version = out.substr(first, out.find('"', first) - first);
    }
    return std::stod(out.substr(key + 13)) / 1e3;
}

struct row {
    bench_config c;  // as run (--steps may override the step count)
    weft_result weft;
    double gemm_s = 0;
    std::optional<double> torch_s;
    double flops_per_token = 0;
};

void print_table(const std::vector<row>& rows, int threads, bool heap_retained) {
    std::printf("weft bench_step: one GPT-2 training step on the CPU (forward + backward_input + backward_weight + "
                "AdamW), one stage, one micro-batch\n");
    std::printf("weft threads: %d (exec::cpu's pool; gemm_ms on one), PyTorch threads: %d; times are medians of "
                "the timed steps\n",
                threads, threads);
    std::printf("PyTorch: %s\n", torch_version.empty() ? "not run" : torch_version.c_str());
    std::printf("heap: %s\n\n", heap_retained ? "freed memory retained (exec::retain_freed_memory, as train_gpt runs)"
                                              : "the C library's default (--default-heap)");
    std::printf("%-6s %6s %5s %4s %4s %4s %9s %9s %9s %9s %9s %8s %9s %9s\n", "config", "params", "L", "C", "T",
                "B", "step_ms", "tok/s", "GFLOP/s", "gemm_ms", "step/gemm", "torch_ms", "torch/weft", "loss");
    for (const auto& r : rows) {
        const double tokens = double(r.c.batch) * r.c.seq_len;
        char torch_ms[32] = "n/a", ratio[32] = "n/a";
        if (r.torch_s) {
            std::snprintf(torch_ms, sizeof torch_ms, "%.1f", *r.torch_s * 1e3);
            std::snprintf(ratio, sizeof ratio, "%.2f", *r.torch_s / r.weft.median.step);
        }
        std::printf("%-6s %5.1fM %5d %4d %4d %4d %9.1f %9.0f %9.1f %9.1f %9.2f %8s %9s %9.4f\n", r.c.name,
                    double(r.weft.parameters) / 1e6, r.c.layers, r.c.d_model, r.c.seq_len, r.c.batch,
                    r.weft.median.step * 1e3, tokens / r.weft.median.step,
                    r.flops_per_token * tokens / r.weft.median.step / 1e9, r.gemm_s * 1e3,
                    r.weft.median.step / r.gemm_s, torch_ms, ratio, r.weft.loss);
    }
    std::printf("\nphase medians (ms), and the step without the optimizer over the GEMMs:\n");
    std::printf("%-6s %9s %6s %9s %9s %9s %14s\n", "config", "forward", "loss", "bwd_in", "bwd_wt", "adamw",
                "(step-adamw)/gemm");
    for (const auto& r : rows) {
        const auto& p = r.weft.median;
        std::printf("%-6s %9.1f %6.1f %9.1f %9.1f %9.1f %14.2f\n", r.c.name, p.forward * 1e3, p.loss * 1e3,
                    p.backward_input * 1e3, p.backward_weight * 1e3, p.optimizer * 1e3,
                    (p.step - p.optimizer) / r.gemm_s);
    }
    std::printf("\ngoals (reported, not asserted): step/gemm <= 1.15, torch/weft >= 1.5\n");
}

void print_json(const std::vector<row>& rows, int threads, bool heap_retained) {
    std::printf("{\"weft_threads\": %d, \"torch_threads\": %d, \"torch_version\": \"%s\", \"heap_retained\": %s, "
                "\"configs\": [",
                threads, threads, torch_version.c_str(), heap_retained ? "true" : "false");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        const auto& p = r.weft.median;
        const double tokens = double(r.c.batch) * r.c.seq_len;
        std::printf("%s\n  {\"name\": \"%s\", \"parameters\": %lld, \"layers\": %d, \"d_model\": %d, \"heads\": %d, "
                    "\"vocab\": %d, \"seq_len\": %d, \"batch\": %d, \"steps\": %d, \"step_ms\": %.4f, "
                    "\"tokens_per_s\": %.2f, \"gflops\": %.3f, \"gemm_ms\": %.4f, \"step_over_gemm\": %.4f, "
                    "\"forward_ms\": %.4f, \"loss_ms\": %.4f, \"backward_input_ms\": %.4f, "
                    "\"backward_weight_ms\": %.4f, \"optimizer_ms\": %.4f, \"torch_ms\": ",
                    i == 0 ? "" : ",", r.c.name, static_cast<long long>(r.weft.parameters), r.c.layers,
                    r.c.d_model, r.c.heads, r.c.vocab, r.c.seq_len, r.c.batch, r.c.steps, p.step * 1e3,
                    tokens / p.step, r.flops_per_token * tokens / p.step / 1e9, r.gemm_s * 1e3, p.step / r.gemm_s,
                    p.forward * 1e3, p.loss * 1e3, p.backward_input * 1e3, p.backward_weight * 1e3,
                    p.optimizer * 1e3);
        if (r.torch_s)
            std::printf("%.4f, \"torch_over_weft\": %.4f}", *r.torch_s * 1e3, *r.torch_s / p.step);
        else
            std::printf("null, \"torch_over_weft\": null}");
    }
    std::printf("\n]}\n");
}

// ---- --parallel: the engine's step at one rank, pp=2 and dp=2 over MPI ------------------

#if WEFT_HAS_MPI

using mpi_engine = weft::engine<weft::sched::all_schedules, weft::shard::replicate, weft::comm::mpi, backend,
                                weft::models::gpt>;

// The small config's model; the batch is 8 rows so that both layouts keep 2 rows per
// micro-batch: 4 micro-batches at one rank and at pp=2, 2 per replica at dp=2 (the GEMMs then
// have the same shapes everywhere, and dualpipev's m >= 2p holds at pp=2).
constexpr int parallel_batch = 8;
constexpr int parallel_microbatches = 4;

const weft::schedule_kind parallel_schedules[] = {
    weft::sched::gpipe::kind, weft::sched::one_f_one_b::kind, weft::sched::interleaved::kind,
    weft::sched::zb_h1::kind, weft::sched::zb_h2::kind,       weft::sched::zbv::kind,
    weft::sched::dualpipev::kind};

struct layout_timing {
    double ms = 0;    // median step, as the engine's step log measures it
    double idle = 0;  // median of the step log's bubble: the ranks' mean idle share of the program
    double exposed_reduce_ms = 0;  // median of the step log's: the reduction the program did not hide
};

layout_timing time_layout(weft::comm::mpi& comm, weft::schedule_kind kind, int pp, int dp, int microbatches,
                          const weft::nn::gpt_config& model, const weft::data::token_batch& batch, int warmup,
                          int steps, double* simulated_bubble, bool overlap_reduce = true) {
    const weft::parallel_config config({.pp = pp, .dp = dp, .microbatches = microbatches,
                                        .chunks = kind.default_chunks(), .schedule = kind,
                                        .world_size = comm.size()});
    mpi_engine engine(comm, config, model,
                      {.batch_size = batch.rows, .optimizer = {.lr = 3e-4, .weight_decay = 0.1},
                       .overlap_reduce = overlap_reduce});
    // T_F = T_B = T_W = 1 (a full backward B costs 2): the bubble of this very program.
    if (simulated_bubble != nullptr) *simulated_bubble = weft::sched::simulate(engine.parts().program()).bubble_rate;
    std::vector<double> ms, idle, exposed;
    for (int step = 0; step < warmup + steps; ++step) {
        const auto stats = engine.step(batch);
        if (step < warmup) continue;
        ms.push_back(stats.milliseconds);
        idle.push_back(stats.bubble);
        exposed.push_back(stats.exposed_reduce_ms);
    }
    return {median(ms), median(idle), median(exposed)};
}

// A rank with nothing to do while rank 0 runs alone: waits without spinning on a core, so the
// one-rank figure is not slowed by MPI's busy polling on the machine's other core.
void wait_quietly(MPI_Comm comm) {
    MPI_Request request = MPI_REQUEST_NULL;
    weft::comm::detail::mpi_check(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
    for (int done = 0;;) {
        weft::comm::detail::mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done != 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

struct parallel_row {
    weft::schedule_kind kind;
    std::string skipped;  // why the schedule cannot run at pp=2; empty when it ran
    layout_timing one, pp2, dp2;
    layout_timing dp2_at_reduce_grad;  // dp=2 with every reduction started at REDUCE_GRAD
    double simulated_bubble = 0;
};

void print_parallel(const std::vector<parallel_row>& rows, const bench_config& c, int steps, bool json) {
    const double tokens = double(parallel_batch) * c.seq_len;
    if (json) {
        std::printf("{\"benchmark\": \"bench_step --parallel\", \"layers\": %d, \"d_model\": %d, \"heads\": %d, "
                    "\"vocab\": %d, \"seq_len\": %d, \"batch\": %d, \"microbatches\": %d, \"steps\": %d, "
                    "\"schedules\": [",
                    c.layers, c.d_model, c.heads, c.vocab, c.seq_len, parallel_batch, parallel_microbatches, steps);
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto& r = rows[i];
            std::printf("%s\n  {\"schedule\": \"%s\", ", i == 0 ? "" : ",", std::string(to_string(r.kind)).c_str());
            if (!r.skipped.empty()) {
                std::printf("\"skipped\": \"%s\"}", r.skipped.c_str());
                continue;
            }
            std::printf("\"one_rank_ms\": %.4f, \"pp2_ms\": %.4f, \"pp2_speedup\": %.4f, \"pp2_idle\": %.4f, "
                        "\"dp2_ms\": %.4f, \"dp2_speedup\": %.4f, \"dp2_exposed_reduce_ms\": %.4f, "
                        "\"dp2_at_reduce_grad_ms\": %.4f, \"dp2_at_reduce_grad_exposed_reduce_ms\": %.4f, "
                        "\"simulated_bubble\": %.4f, \"pp2_limit\": %.4f}",
                        r.one.ms, r.pp2.ms, r.one.ms / r.pp2.ms, r.pp2.idle, r.dp2.ms, r.one.ms / r.dp2.ms,
                        r.dp2.exposed_reduce_ms, r.dp2_at_reduce_grad.ms, r.dp2_at_reduce_grad.exposed_reduce_ms,
                        r.simulated_bubble, 2 * (1 - r.simulated_bubble));
        }
        std::printf("\n]}\n");
        return;
    }
    std::printf("weft bench_step --parallel: the engine's GPT-2 step (forward, backward, gradient reduction, AdamW) "
                "over MPI, 2 ranks, one Eigen thread each\n");
    std::printf("model: %d layers, d_model %d, %d heads, vocab %d, seq %d; batch %d rows (%.0f tokens); "
                "one rank and pp=2: %d micro-batches; dp=2: %d per replica; median of %d steps\n",
                c.layers, c.d_model, c.heads, c.vocab, c.seq_len, parallel_batch, tokens, parallel_microbatches,
                parallel_microbatches / 2, steps);
    std::printf("limit = 2 (1 - b), b = sched::simulate's bubble rate of the pp=2 program at T_F = T_B = T_W "
                "(= 2 / (1 + bubble/compute)); pp idle = measured mean idle share of the ranks\n");
    std::printf("dp2 exp = the dp=2 reduction time the backward did not hide (ms), each layer's reduction started "
                "as its gradients are final; at RG = every reduction started at REDUCE_GRAD: step ms / exposed ms\n\n");
    std::printf("%-12s %9s %9s %8s %8s %9s %8s %8s %8s %8s %15s\n", "schedule", "1rank_ms", "pp2_ms", "speedup",
                "limit", "pp_idle", "dp2_ms", "speedup", "sim_b", "dp2_exp", "dp2 at RG");
    for (const auto& r : rows) {
        const std::string name(to_string(r.kind));
        if (!r.skipped.empty()) {
            std::printf("%-12s n/a: %s\n", name.c_str(), r.skipped.c_str());
            continue;
        }
        std::printf("%-12s %9.1f %9.1f %8.2f %8.2f %8.1f%% %8.1f %8.2f %7.1f%% %8.2f %7.1f / %5.2f\n", name.c_str(),
                    r.one.ms, r.pp2.ms, r.one.ms / r.pp2.ms, 2 * (1 - r.simulated_bubble), 100 * r.pp2.idle,
                    r.dp2.ms, r.one.ms / r.dp2.ms, 100 * r.simulated_bubble, r.dp2.exposed_reduce_ms,
                    r.dp2_at_reduce_grad.ms, r.dp2_at_reduce_grad.exposed_reduce_ms);
    }
    std::printf("\nspeed-ups are reported, never asserted\n");
}

int run_parallel(int& argc, char**& argv, int steps, bool json, const std::vector<std::string>& only) {
    weft::comm::mpi_environment environment(argc, argv);
    auto world = weft::comm::mpi::world();
    try {
        weft::require(world.size() == 2, "mpirun -np", world.size(),
                      "bench_step --parallel compares one rank with pp=2 and dp=2; run it with 2 ranks");
        const bench_config& c = configs[0];
        const int warmup = c.warmup;
        if (steps == 0) steps = c.steps;
        const weft::nn::gpt_config model{.num_layers = c.layers, .d_model = c.d_model, .num_heads = c.heads,
                                         .vocab_size = c.vocab, .seq_len = c.seq_len, .seed = 1234};
        weft::data::token_batch batch{parallel_batch, c.seq_len, {}, {}};
        std::mt19937 rng(1);
        batch.inputs.resize(std::size_t(parallel_batch) * c.seq_len);
        batch.targets.resize(batch.inputs.size());
        for (auto& t : batch.inputs) t = std::int32_t(rng() % unsigned(c.vocab));
        for (auto& t : batch.targets) t = std::int32_t(rng() % unsigned(c.vocab));

        // Rank 0's own communicator for the one-rank runs (a split is collective: made once).
        auto alone = world.split(world.rank(), 0);
        std::vector<parallel_row> rows;
        for (const auto kind : parallel_schedules) {
            if (!only.empty() && std::find(only.begin(), only.end(), to_string(kind)) == only.end()) continue;
            parallel_row r{kind, {}, {}, {}, {}, {}, 0};
            // Generating is pure and the same on every rank, so every rank skips alike.
            try {
                (void)weft::sched::all_schedules::generate(
                    kind, weft::sched::schedule_params{.ranks = 2, .microbatches = parallel_microbatches,
                                                       .chunks = kind.default_chunks()});
            } catch (const weft::error& e) {
                r.skipped = e.what();
                rows.push_back(r);
                continue;
            }
            if (world.rank() == 0)
                r.one = time_layout(alone, kind, 1, 1, parallel_microbatches, model, batch, warmup, steps, nullptr);
            wait_quietly(world.native());
            r.pp2 = time_layout(world, kind, 2, 1, parallel_microbatches, model, batch, warmup, steps,
                                &r.simulated_bubble);
            r.dp2 = time_layout(world, kind, 1, 2, parallel_microbatches / 2, model, batch, warmup, steps, nullptr);
            r.dp2_at_reduce_grad = time_layout(world, kind, 1, 2, parallel_microbatches / 2, model, batch, warmup,
                                               steps, nullptr, false);
            rows.push_back(r);
        }
        if (world.rank() == 0) print_parallel(rows, c, steps, json);
        return 0;
    } catch (const std::exception& e) {
        // The other rank may wait in a collective for this one: abort rather than hang.
        std::fprintf(stderr, "bench_step --parallel (rank %d): %s\n", world.rank(), e.what());
        std::fflush(stderr);
        if (world.size() > 1) MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
}

#endif  // WEFT_HAS_MPI

int parse_positive(const char* flag, const char* value) {
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    weft::require(end != value && *end == '\0' && v >= 1 && v <= 4096, flag, value, "must be an integer in [1, 4096]");
    return int(v);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        bool json = false, torch = true, default_heap = false, parallel = false;
        std::vector<std::string> only;  // --schedule: the schedules --parallel runs (default: all)
        int threads = 1, steps = 0;
        bool torch_named = false;  // --python or --torch-script given: the reference must run
        std::string which = "all", python = "/usr/bin/python3",
                    script = WEFT_SOURCE_DIR "/tests/reference/gpt_step_torch.py";
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto value = [&]() -> const char* {
                weft::require(i + 1 < argc, a, "(missing)", "takes a value");
                return argv[++i];
            };
            if (a == "--json") json = true;
            else if (a == "--no-torch") torch = false;
            else if (a == "--default-heap") default_heap = true;
            else if (a == "--parallel") parallel = true;
            else if (a == "--schedule") {
                // A comma-separated list, for --parallel: e.g. 1f1b,zb-h1.
                std::string list = value();
                for (std::size_t first = 0; first <= list.size();) {
                    const std::size_t comma = std::min(list.find(',', first), list.size());
                    const auto kind = weft::sched::parse_schedule_kind(list.substr(first, comma - first));
                    only.push_back(std::string(to_string(kind)));
                    first = comma + 1;
                }
            }
            else if (a == "--threads") threads = parse_positive("--threads", value());
            else if (a == "--steps") steps = parse_positive("--steps", value());
            else if (a == "--config") which = value();
            else if (a == "--python") python = value(), torch_named = true;
            else if (a == "--torch-script") script = value(), torch_named = true;
            else if (a == "--help" || a == "-h") {
                std::printf("usage: bench_step [--json] [--threads N] [--steps N] [--config small|big|all] "
                            "[--no-torch] [--python PATH] [--torch-script PATH] [--default-heap]\n"
                            "       mpirun -np 2 bench_step --parallel [--steps N] [--json] [--schedule NAME,NAME...]\n");
                return 0;
            } else
                throw weft::invalid_argument("argument", a,
                                             "one of --json, --threads, --steps, --config, --no-torch, --python, "
                                             "--torch-script, --default-heap, --parallel, --schedule, --help");
        }
        weft::require(which == "all" || which == "small" || which == "big", "--config", which,
                      "must be small, big or all");
        // Without these options a missing PyTorch leaves its column empty ("not run"); with
        // them the user asked for the comparison, so a bad path is an error, before measuring.
        if (torch_named) {
            weft::require(torch, "--no-torch", "given", "excludes --python and --torch-script");
            weft::require(python.find('/') == std::string::npos || ::access(python.c_str(), X_OK) == 0, "--python",
                          python, "must be an executable file (or a command on PATH)");
            weft::require(::access(script.c_str(), R_OK) == 0, "--torch-script", script, "must be a readable file");
        }
        weft::require(parallel || only.empty(), "--schedule", only.empty() ? "" : only.front(),
                      "chooses schedules for --parallel only");
        if (parallel) {
            weft::require(threads == 1, "--threads", threads, "--parallel runs one Eigen thread per rank; valid: 1");
            // As train_gpt runs: freed activation memory is reused from step to step.
            if (!default_heap) weft::exec::retain_freed_memory();
#if WEFT_HAS_MPI
            return run_parallel(argc, argv, steps, json, only);
#else
            throw weft::error("--parallel needs MPI; this bench_step was built without it (WEFT_HAS_MPI is off)");
#endif
        }
        const bool heap_retained = !default_heap && weft::exec::retain_freed_memory();

        std::vector<row> rows;
        backend cpu(threads);  // weft's kernels on --threads threads, as train_gpt --threads runs them
        for (bench_config c : configs) {
            if (which != "all" && which != c.name) continue;
            if (steps != 0) c.steps = steps;
            weft::nn::gpt_stage<backend> stage(
                cpu, weft::nn::gpt_config{.num_layers = c.layers, .d_model = c.d_model, .num_heads = c.heads,
                                     .vocab_size = c.vocab, .seq_len = c.seq_len, .seed = 1234},
                {0, c.layers + 2});
            row r{c, {}, 0, std::nullopt, 0};
            r.weft = time_weft(c, stage);
            r.gemm_s = time_gemms(c, stage);
            if (torch) r.torch_s = time_torch(c, threads, python, script);
            if (torch_named && !r.torch_s)
                throw weft::error("the PyTorch reference (--python " + python + " --torch-script " + script +
                                  ") did not run or printed no median_ms; run it by hand to see why");
            r.flops_per_token = weft::train::gpt_flops_per_token(r.weft.parameters, c.layers, c.d_model, c.seq_len);
            rows.push_back(r);
        }
        if (json) print_json(rows, threads, heap_retained);
        else print_table(rows, threads, heap_retained);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_step: %s\n", e.what());
        return 2;
    }
}
