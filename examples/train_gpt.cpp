// examples/train_gpt: trains GPT-2 on an llm.c token file with any pipeline schedule,
// data and tensor parallelism and any ZeRO stage. Under mpirun it uses MPI, one rank per
// process; without mpirun, `--ranks N` runs N ranks as threads of this process.
//
//   make_dataset --out-dir data            # byte-level tokens of a real English text
//   mpirun -np 4 ./train_gpt --schedule zb-h1 --pp 4 --data data/train.bin --steps 20
//   mpirun -np 8 ./train_gpt --pp 2 --dp 2 --tp 2 --zero 3 --data data/train.bin
//   mpirun -np 4 ./train_gpt --pp 4 --steps 60 --data data/train.bin --switch 20:pp=2,dp=2
//                            --switch 40:dp=2,tp=2,zero=3 --switch 50:world=2,pp=2   (docs/elastic.md)
//   mpirun -np 8 ./train_gpt --device cuda --pp 2 --dp 4 --data data/train.bin   (one GPU per rank)
//   mpirun -np 8 ./train_gpt --device cuda --gpu-comm nccl --pp 2 --dp 4 --data data/train.bin
//   mpirun -np 8 ./train_gpt --device cuda --gpu-comm cuda-aware-mpi --pp 2 --dp 4 --data data/train.bin
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "weft/exec/cpu.hpp"
#include "weft/exec/cpu_gemm_rate.hpp"
#include "weft/exec/cpu_heap.hpp"
#include "gpt_run_cli.hpp"
#include "launch.hpp"
#include "stop_signal.hpp"
#include "train_gpt_run.hpp"
#if WEFT_TRAIN_GPT_CUDA
#include "train_gpt_cuda_device.hpp"
#endif

namespace {

using weft_examples::train_gpt::run_options;

// Without --peak-tflops, MFU on the CPU is against this CPU's measured GEMM rate times the
// cores the ranks can use (ranks beyond the cores share them).
template <weft::communicator Comm>
double measured_cpu_peak_tflops(Comm& world) {
    const double per_core = weft::exec::measure_cpu_gemm_gflops();
    const int cores = std::min(world.size(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    if (world.rank() == 0)
        std::printf("MFU is against a measured GEMM peak of %.1f GFLOP/s per core x %d core(s)\n", per_core, cores);
    return per_core * cores / 1e3;
}

template <weft::communicator Comm>
void train_on_device(Comm& world, const run_options& o) {
    weft::require(o.device == "cpu" || o.device == "cuda", "--device", o.device, "valid: cpu, cuda");
    weft::require(o.gpu_comm == "host-staged" || o.gpu_comm == "nccl" || o.gpu_comm == "cuda-aware-mpi", "--gpu-comm",
                  o.gpu_comm, "valid: host-staged, nccl, cuda-aware-mpi");
    weft::require(o.gpu_comm == "host-staged" || o.device == "cuda", "--gpu-comm", o.gpu_comm,
                  "is for --device cuda (the CPU's ranks talk over MPI or threads)");
    weft::require(!o.cuda_graphs || o.device == "cuda", "--cuda-graphs", "given",
                  "is for --device cuda (the CPU backend has no graphs to replay)");
    weft::require(o.attention_kernel == "wmma" || o.attention_kernel == "mma", "--attention-kernel",
                  o.attention_kernel, "valid: wmma, mma");
    weft::require(o.attention_kernel == "wmma" || o.device == "cuda", "--attention-kernel", o.attention_kernel,
                  "is for --device cuda (the CPU backend has one attention)");
    weft::require(!o.kernel_profile || o.device == "cuda", "--kernel-profile", "given",
                  "is for --device cuda (it times the GPU's kernels)");
    weft::require(!o.kernel_profile || !o.cuda_graphs, "--kernel-profile", "given",
                  "cannot go with --cuda-graphs (a graph replays its kernels without the launches it times)");
    if (o.device == "cuda") {
#if WEFT_TRAIN_GPT_CUDA
        weft_examples::train_gpt::train_on_cuda(world, o);
        return;
#else
        throw weft::invalid_argument("--device", o.device,
                                     "this train_gpt was built without CUDA (nvcc, cuBLAS and NCCL); valid: cpu");
#endif
    }
    weft_examples::train_gpt::train(
        world, o, [] { return weft::exec::cpu{}; }, [](Comm& w) { return measured_cpu_peak_tflops(w); });
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Train GPT-2 on an llm.c token file with a pipeline schedule, over MPI (under mpirun) or threads."};
    run_options o;
    app.add_option("--schedule", o.schedule, "pipeline schedule: " + weft::sched::schedule_name_list())
        ->capture_default_str();
    const auto ranks_range = weft_examples::int_in(1, 1 << 16);
    app.add_option("--pp", o.pp, "pipeline stages")->check(ranks_range)->capture_default_str();
    app.add_option("--dp", o.dp, "data-parallel replicas")->check(ranks_range)->capture_default_str();
    app.add_option("--tp", o.tp, "tensor-parallel ranks per stage (must divide --heads)")
        ->check(ranks_range)
        ->capture_default_str();
    app.add_option("--zero", o.zero,
                   "ZeRO stage: 0 (replicate), 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)")
        ->capture_default_str();
    app.add_option("--chunks", o.chunks,
                   "model chunks per pipeline rank (default: 2 for interleaved, looped-bfs, zbv, dualpipev)");
    app.add_option("--ranks", o.ranks, "without mpirun: ranks to run as threads (default pp*dp*tp)")
        ->check(weft_examples::int_in(1, 1 << 16));
    app.add_option("--comm-timeout", o.comm_timeout,
                   "seconds a rank waits for a receive or collective before it reports what it waited for and "
                   "on which rank, and the job ends (exit code 2)")
        ->check(weft_examples::finite_at_least(0, false))
        ->capture_default_str();
    weft_examples::add_gpt_run_options(app, o, {.heads = "must divide --d-model", .seq_len = "",
                                                .batch = "a multiple of --dp times --microbatches"});
    app.add_option("--microbatches", o.microbatches, "micro-batches per step")
        ->check(weft_examples::int_in(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--warmup-steps", o.warmup_steps, "steps of linear warmup to --lr")
        ->check(weft_examples::int_in(0, 1LL << 40))
        ->capture_default_str();
    app.add_option("--min-lr", o.min_lr, "learning rate the cosine decay ends at (default: --lr, no decay)")
        ->check(weft_examples::finite_at_least(0, false));
    app.add_option("--decay-steps", o.decay_steps,
                   "the step the cosine decay reaches --min-lr (default: --steps)")
        ->check(weft_examples::int_in(0, 1LL << 40));
    app.add_option("--skip-nonfinite", o.skip_nonfinite,
                   "non-finite steps (NaN or infinite loss or gradients) to skip, not applied, before the run "
                   "stops with exit code 3 (0: the first one stops it)")
        ->check(weft_examples::int_in(0, 1 << 30))
        ->capture_default_str();
    app.add_option("--optimizer", o.optimizer, "adamw or sgd")->capture_default_str();
    app.add_option("--grad-clip", o.grad_clip,
                   "clip the gradients to this global L2 norm (over every rank, tied wte once), as "
                   "torch.nn.utils.clip_grad_norm_; 0: no clipping (the norm is logged either way)")
        ->check(weft_examples::finite_at_least(0, true))
        ->capture_default_str();
    app.add_option("--peak-tflops", o.peak_tflops,
                   "peak TFLOP/s for MFU (0: this CPU's measured GEMM rate times its cores, or with --device cuda "
                   "the GPU's dense bf16 peak from weft's table)")
        ->check(weft_examples::finite_at_least(0, true))
        ->capture_default_str();
    app.add_option("--device", o.device,
                   "cpu, or cuda: each rank computes on one GPU, the local rank's (ranks may share one; "
                   "docs/cuda.md)")
        ->capture_default_str();
    app.add_option("--gpu-comm", o.gpu_comm,
                   "with --device cuda: host-staged (activations and reductions through host memory over MPI or "
                   "threads), nccl (NCCL between the GPUs, one MPI rank per GPU; checkpoints and --switch go "
                   "over MPI), or cuda-aware-mpi (device buffers handed to an MPI that reads GPU memory itself; "
                   "docs/cuda.md)")
        ->capture_default_str();
    app.add_flag("--cuda-graphs", o.cuda_graphs,
                 "with --device cuda: capture each F, B, I and W into a CUDA graph at its second call and "
                 "replay it after (--tp 1 and --zero 0 or 1 only; docs/cuda.md)");
    app.add_option("--attention-kernel", o.attention_kernel,
                   "with --device cuda: wmma (flash attention on WMMA fragments, the default) or mma "
                   "(mma.sync with the scores in registers, FlashAttention-2's design; not yet run on a GPU: "
                   "docs/cuda.md)")
        ->capture_default_str();
    app.add_flag("--kernel-profile", o.kernel_profile,
                 "with --device cuda: time every kernel and GEMM on the GPU and print, at the end, their time per "
                 "step by operation (steps after the first; not with --cuda-graphs; docs/cuda.md)");
    app.add_option("--partition", o.partition,
                   "layers per stage incl. the embedding and head units, e.g. 2,3 for 3 layers on 2 stages "
                   "(default: balanced by estimated flops per stage)")
        ->delimiter(',');
    app.get_option("--steps")->description(
        "the step the run ends at: a run resumed at step k trains --steps - k more");
    auto* checkpoint_dir = app.add_option(
        "--checkpoint-dir", o.checkpoint_dir,
        "save checkpoints here as step-<n>/ directories (weights, optimizer state, manifest) with a `latest` "
        "pointer, at the end and when stopped by SIGTERM or SIGINT (docs/checkpoints.md)");
    app.add_option("--checkpoint-every", o.checkpoint_every, "also save a checkpoint every N steps")
        ->check(weft_examples::int_in(1, 1LL << 40))
        ->needs(checkpoint_dir);
    app.add_option("--keep", o.keep, "keep the newest K checkpoints (0: all)")
        ->check(weft_examples::int_in(0, 1 << 30))
        ->capture_default_str()
        ->needs(checkpoint_dir);
    auto* val_data = app.add_option("--val-data", o.val_data,
                                    "llm.c token file for a validation loss (forwards only), at the end of the run "
                                    "and every --val-every steps");
    app.add_option("--val-every", o.val_every, "steps between validation losses (0: at the end only)")
        ->check(weft_examples::int_in(0, 1LL << 40))
        ->capture_default_str()
        ->needs(val_data);
    app.add_option("--val-batches", o.val_batches, "batches of --batch sequences per validation loss")
        ->check(weft_examples::int_in(1, 1 << 20))
        ->capture_default_str()
        ->needs(val_data);
    app.add_option("--resume", o.resume,
                   "continue a run from a checkpoint directory, or from the newest one of a --checkpoint-dir: "
                   "weights, optimizer, step and data position, checked against its manifest");
    app.add_option("--switch", o.switches,
                   "switch the layout before step STEP, in memory: STEP:key=value,... with keys pp, dp, tp, zero, "
                   "schedule, chunks, partition (units per stage, e.g. partition=3,5) and world; keys left out take "
                   "the defaults, world keeps its value; world below the ranks launched leaves the others as spares "
                   "(repeatable; docs/elastic.md)");
    app.add_option("--staging-mib", o.staging_mib, "the staging cap of a switch's transfers, in MiB")
        ->check(weft_examples::finite_at_least(0, false))
        ->capture_default_str();
    weft_examples::integers_in_decimal(app);
    CLI11_PARSE(app, argc, argv);

    // Reuse freed activation memory from step to step instead of page-faulting it in again
    // (10-30 % of a CPU step; docs/performance.md).
    weft::exec::retain_freed_memory();
    // SIGTERM (Slurm's warning before it kills a job) and SIGINT finish the step first.
    const weft_examples::stop_on_signals stop_signals;
    const auto ranks = weft_examples::ranks_to_run("train_gpt", "--pp x --dp x --tp",
                                                   static_cast<long long>(o.pp) * o.dp * o.tp, o.ranks);
    if (!ranks) return 2;
    return weft_examples::run("train_gpt", argc, argv, *ranks, [&](auto& world) { train_on_device(world, o); });
}

