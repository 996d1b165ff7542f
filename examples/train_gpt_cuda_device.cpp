// train_gpt --device cuda (train_gpt_cuda_device.hpp). Each rank makes exec::cuda on its GPU.
// With --gpu-comm host-staged (the default) it talks to the others through comm::host_staged
// over the world it was given, which carries activations between GPUs through host memory
// (ranks may share a GPU). With --gpu-comm nccl (MPI ranks, one GPU each) activations and
// reductions go over comm::nccl, paired with the MPI world (comm::with_host) for what moves
// host memory point to point: checkpoints and --switch. With --gpu-comm cuda-aware-mpi (MPI
// ranks, an MPI that reads device memory itself) device buffers go to MPI as they are, through
// comm::device_direct. The training state lives in CUDA managed memory every way.
#include "train_gpt_cuda_device.hpp"

#include <cstdio>
#include <string>

#include "weft/comm/cuda/host_staged.hpp"
#include "weft/exec/cuda.hpp"
#include "weft/exec/cuda/peak_flops.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/run/launch.hpp"
#if WEFT_HAS_MPI
#include "weft/comm/cuda/device_direct.hpp"
#include "weft/comm/mpi_cuda_support.hpp"
#endif
#if WEFT_HAS_MPI && WEFT_HAS_NCCL
#include "weft/comm/nccl.hpp"
#include "weft/comm/with_host.hpp"
#endif

namespace weft_examples::train_gpt {

namespace {

// What --device cuda cannot run: head sizes the attention kernel has no instance for
// (weft/exec/cuda/kernels/flash_attention.cuh); named by option before anything runs.
void check_cuda_model(const run_options& o) {
    if (o.sizes.heads <= 0 || o.sizes.d_model % o.sizes.heads != 0) return;  // train()'s checks name these
    const int head_size = o.sizes.d_model / o.sizes.heads;
    weft::require(head_size % 32 == 0 && head_size <= 128, "--heads", o.sizes.heads,
                  "--d-model / --heads = " + std::to_string(head_size) +
                      " must be 32, 64, 96 or 128 with --device cuda (its attention kernel's head sizes)");
}

// What --cuda-graphs cannot run yet, for every layout of the run (--switch included): a
// tensor-parallel sum inside F and B would be a communication inside a graph, and ZeRO-2 and
// 3 bring a stage's gradients (and ZeRO-3 its weights) back in new buffers every step, whose
// addresses a captured graph cannot follow.
void check_cuda_graphs(const run_options& o) {
    if (!o.cuda_graphs) return;
    const auto check = [](const std::string& where, int tp, int zero) {
        weft::require(tp == 1, where + "tp", tp,
                      "must be 1 with --cuda-graphs (a tensor-parallel sum inside an action is not captured yet)");
        weft::require(zero <= 1, where + "zero", zero,
                      "must be 0 or 1 with --cuda-graphs (ZeRO-2 and 3 gather gradients or weights into new "
                      "buffers every step, which a graph cannot follow)");
    };
    check("--", o.tp, o.zero);
    for (const std::string& text : o.switches) {
        const auto s = weft::run::parse_layout_switch(text);
        check("--switch " + text + ": ", s.to.tp, s.to.zero);
    }
}

// What a rank reports when its machine has no GPU: ctest reads the exit code as "skipped".
weft::run::stopped no_gpu() {
    return weft::run::stopped("--device cuda: this machine has no CUDA GPU (or no driver); use --device cpu",
                              weft::run::exit_code::no_gpu);
}

// The run on GPU local_rank % (GPUs here) over the communicator make_comm(device) returns,
// whose kind `carried` names for the log.
template <weft::communicator World, class MakeComm>
void train_on_gpu(World& world, const run_options& o, int local_rank, const char* carried, MakeComm&& make_comm) {
    check_cuda_model(o);
    check_cuda_graphs(o);
    const int gpus = weft::gpu::device_count();
    const int device = weft::run::gpu_of(local_rank, gpus);
    auto comm = make_comm(device);
    const auto make_backend = [&] {
        // Every rank sees the same answer on one machine; on several, a node without a GPU
        // ends the job with a message from each of its ranks.
        if (gpus == 0) throw no_gpu();
        if (world.rank() == 0)
            std::printf("device cuda | %d GPU(s) on this machine | rank 0 on GPU %d: %s | activations between "
                        "ranks %s | attention kernels %s\n",
                        gpus, device, weft::gpu::device_name(device).c_str(), carried, o.attention_kernel.c_str());
        weft::exec::cuda backend(device);
        backend.enable_action_graphs(o.cuda_graphs);
        backend.set_attention_kernel(o.attention_kernel == "mma" ? weft::exec::cuda_detail::attention_kernel::mma
                                                                 : weft::exec::cuda_detail::attention_kernel::wmma);
        return backend;
    };
    train(comm, o, make_backend, [device](auto& w) {
        const double peak = weft::exec::cuda_detail::bf16_peak_tflops(device);
        weft::require(peak > 0, "--peak-tflops", 0,
                      "must be given for GPU \"" + weft::gpu::device_name(device) +
                          "\", which is not in weft's table of bf16 peaks (weft/exec/cuda/peak_flops.hpp)");
        if (w.rank() == 0) std::printf("MFU is against the GPU's dense bf16 peak of %.1f TFLOP/s\n", peak);
        return peak;
    });
}

// --gpu-comm host-staged: a communicator of the world's own (a split), wrapped to move device
// memory through the host.
template <weft::communicator World>
void train_host_staged(World& world, const run_options& o, int local_rank) {
    train_on_gpu(world, o, local_rank, "through host memory (comm::host_staged)",
                 [&](int) { return weft::comm::host_staged<World>(world.split(0, world.rank())); });
}

#if WEFT_HAS_MPI
// --gpu-comm cuda-aware-mpi: device buffers handed to MPI as they are, over a split of the
// world of its own. An MPI built without CUDA is refused before any GPU is looked for; the
// running MPI's own answer is asked once a GPU is known to be there (without one, Open MPI
// says no). Where the MPI cannot say, the flag is the user's word for it.
void refuse_unless_cuda_aware(const run_options& o, const weft::comm::mpi_cuda_support& support) {
    weft::require(support.cuda_aware != weft::comm::mpi_cuda_support::answer::no, "--gpu-comm", o.gpu_comm,
                  "needs an MPI that reads GPU memory, and this one does not (" + support.how +
                      "); use host-staged or nccl, or set " +
                      weft::comm::assume_cuda_aware_mpi_variable + "=1 if it does");
}

void train_device_direct(weft::comm::mpi& world, const run_options& o, int local_rank) {
    refuse_unless_cuda_aware(o, weft::comm::query_mpi_cuda_build_support());
    train_on_gpu(world, o, local_rank, "directly in device memory (comm::device_direct over MPI)", [&](int) {
        if (weft::gpu::device_count() == 0) throw no_gpu();  // before the run-time query
        const auto support = weft::comm::query_mpi_cuda_support();
        refuse_unless_cuda_aware(o, support);
        if (world.rank() == 0)
            std::printf("cuda-aware-mpi | %s%s\n",
                        support.cuda_aware == weft::comm::mpi_cuda_support::answer::yes ? "" : "not checked: ",
                        support.how.c_str());
        return weft::comm::device_direct<weft::comm::mpi>(world.split(0, world.rank()));
    });
}
#endif

}  // namespace

void train_on_cuda(weft::comm::local& world, const run_options& o) {
    weft::require(o.gpu_comm == "host-staged", "--gpu-comm", o.gpu_comm,
                  "needs one MPI process per GPU (mpirun); ranks as threads of one process use host-staged");
    train_host_staged(world, o, weft::run::local_rank(world));
}

#if WEFT_HAS_MPI
void train_on_cuda(weft::comm::mpi& world, const run_options& o) {
    const int local_rank = weft::run::local_rank(world);
    if (o.gpu_comm == "host-staged") return train_host_staged(world, o, local_rank);
    if (o.gpu_comm == "cuda-aware-mpi") return train_device_direct(world, o, local_rank);
#if WEFT_HAS_NCCL
    using nccl_with_mpi = weft::comm::with_host<weft::comm::nccl, weft::comm::mpi>;
    train_on_gpu(world, o, local_rank, "over NCCL (comm::nccl; checkpoints and switches over MPI)",
                 [&](int device) {
                     if (weft::gpu::device_count() == 0) throw no_gpu();  // before NCCL looks for it
                     // Both over the world's ranks in its order: the device side from the
                     // world, the host side a split of it of its own.
                     auto device_side = weft::comm::nccl::from_mpi(world, device);
                     return nccl_with_mpi(std::move(device_side), world.split(0, world.rank()));
                 });
#else
    throw weft::invalid_argument("--gpu-comm", o.gpu_comm,
                                 "this train_gpt was built without NCCL (weft::nccl); valid: host-staged, "
                                 "cuda-aware-mpi");
#endif
}
#endif

}  // namespace weft_examples::train_gpt
