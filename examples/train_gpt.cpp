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
#include "weft/run/launch.hpp"
#include "weft/run/options.hpp"
#include "weft/run/preemption.hpp"
#include "train_gpt_run.hpp"
#if WEFT_TRAIN_GPT_CUDA
#include "train_gpt_cuda_device.hpp"
#endif

namespace {

using weft_examples::train_gpt::run_options;

// Without --peak-tflops, MFU on the CPU is against this CPU's measured GEMM rate times the
// cores the ranks can use (ranks beyond the cores share them). Only rank 0 measures, and only
// its step lines show MFU: ranks measuring at once on a shared machine slow each other
// (caches, memory bandwidth, a host's sibling threads), and 2 ranks on 2 cores measured half
// the rate one rank did, so MFU read above 100%. No collective: a process that joins a
// running job (--elastic) calls this where the job's ranks do not. The other ranks return 0,
// which leaves MFU out of their own step figures (so does a rank that becomes rank 0 after the
// first one left an elastic run).
template <weft::communicator Comm>
double measured_cpu_peak_tflops(Comm& world) {
    if (world.rank() != 0) return 0;
    const double per_core = weft::exec::measure_cpu_gemm_gflops();
    const int cores = std::min(world.size(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    std::printf("MFU is against a measured GEMM peak of %.1f GFLOP/s per core x %d core(s)\n", per_core, cores);
    return per_core * cores / 1e3;
}

template <weft::communicator Comm>
void train_on_device(Comm& world, const run_options& o) {
    const auto for_cuda = [&](bool given, const char* option, const std::string& value, const char* why) {
        weft::require(!given || o.device == "cuda", option, value, std::string("is for --device cuda (") + why + ")");
    };
    weft::require(o.device == "cpu" || o.device == "cuda", "--device", o.device, "valid: cpu, cuda");
    weft::require(o.gpu_comm == "host-staged" || o.gpu_comm == "nccl" || o.gpu_comm == "cuda-aware-mpi", "--gpu-comm",
                  o.gpu_comm, "valid: host-staged, nccl, cuda-aware-mpi");
    for_cuda(o.gpu_comm != "host-staged", "--gpu-comm", o.gpu_comm, "the CPU's ranks talk over MPI or threads");
    for_cuda(o.cuda_graphs, "--cuda-graphs", "given", "the CPU backend has no graphs to replay");
    weft::require(o.attention_kernel == "wmma" || o.attention_kernel == "mma", "--attention-kernel",
                  o.attention_kernel, "valid: wmma, mma");
    for_cuda(o.attention_kernel != "wmma", "--attention-kernel", o.attention_kernel, "the CPU backend has one attention");
    for_cuda(o.kernel_profile, "--kernel-profile", "given", "it times the GPU's kernels");
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
    weft::run::add_options(app, o, weft::run::options::all, o.sizes);
    const char* device = "Device";
    app.add_option("--device", o.device,
                   "cpu, or cuda: each rank computes on one GPU, the local rank's (ranks may share one; docs/cuda.md)")
        ->capture_default_str()->group(device);
    app.add_option("--gpu-comm", o.gpu_comm,
                   "with --device cuda: host-staged (activations and reductions through host memory over MPI or "
                   "threads), nccl (NCCL between the GPUs, one MPI rank per GPU; checkpoints and --switch go over "
                   "MPI), or cuda-aware-mpi (device buffers handed to an MPI that reads GPU memory itself)")
        ->capture_default_str()->group(device);
    app.add_flag("--cuda-graphs", o.cuda_graphs,
                 "with --device cuda: capture each F, B, I and W into a CUDA graph at its second call and replay it "
                 "after (--tp 1 and --zero 0 or 1 only)")->group(device);
    app.add_option("--attention-kernel", o.attention_kernel,
                   "with --device cuda: wmma (flash attention on WMMA fragments) or mma (mma.sync with the scores "
                   "in registers, FlashAttention-2's design; not yet run on a GPU)")
        ->capture_default_str()->group(device);
    app.add_flag("--kernel-profile", o.kernel_profile,
                 "with --device cuda: time every kernel and GEMM on the GPU and print their time per step at the end "
                 "(steps after the first; not with --cuda-graphs)")->group(device);
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;

    // Reuse freed activation memory from step to step instead of page-faulting it in again
    // (10-30 % of a CPU step; docs/performance.md).
    weft::exec::retain_freed_memory();
    // SIGTERM (Slurm's warning before it kills a job) and SIGINT finish the step first.
    const weft::run::stop_on_signals stop_signals;
    const auto ranks = [&] {
        return weft::run::ranks_to_run("--pp x --dp x --tp", static_cast<long long>(o.pp) * o.dp * o.tp, o.ranks);
    };
    return weft::run::launch("train_gpt", argc, argv, ranks, [&](auto& world) { train_on_device(world, o); });
}
