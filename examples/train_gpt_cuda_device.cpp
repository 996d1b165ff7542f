// train_gpt --device cuda (train_gpt_cuda_device.hpp). Each rank makes exec::cuda on its GPU
// and talks to the others through comm::host_staged over the world it was given, which
// carries activations between GPUs through host memory; the training state lives in CUDA
// managed memory, which data parallelism and ZeRO reduce from the host. Ranks may share a GPU.
#include "train_gpt_cuda_device.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "weft/comm/cuda/host_staged.hpp"
#include "weft/exec/cuda.hpp"
#include "weft/exec/cuda/peak_flops.hpp"
#include "weft/exec/cuda/runtime.hpp"

namespace weft_examples::train_gpt {

namespace {

// The rank's index among the ranks of its node, as the launcher tells it (OpenMPI, MPICH /
// Intel MPI, Slurm), or -1.
int launcher_local_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
        if (const char* value = std::getenv(name); value != nullptr) return std::atoi(value);
    return -1;
}

// What --device cuda cannot run: head sizes the attention kernel has no instance for
// (weft/exec/cuda/kernels/flash_attention.cuh); named by option before anything runs.
void check_cuda_model(const run_options& o) {
    if (o.heads <= 0 || o.d_model % o.heads != 0) return;  // train()'s checks name these
    const int head_size = o.d_model / o.heads;
    weft::require(head_size % 32 == 0 && head_size <= 128, "--heads", o.heads,
                  "--d-model / --heads = " + std::to_string(head_size) +
                      " must be 32, 64, 96 or 128 with --device cuda (its attention kernel's head sizes)");
}

template <weft::communicator World>
void train_on_gpu(World& world, const run_options& o, int local_rank) {
    check_cuda_model(o);
    const int gpus = weft::cuda::device_count();
    const int device = gpus > 0 ? local_rank % gpus : 0;
    // A communicator of its own (a split), wrapped to move device memory through the host.
    weft::comm::host_staged<World> staged(world.split(0, world.rank()));
    const auto make_backend = [&] {
        // Every rank sees the same answer on one machine; on several, a node without a GPU
        // ends the job with a message from each of its ranks.
        if (gpus == 0)
            throw run_stopped("--device cuda: this machine has no CUDA GPU (or no driver); use --device cpu",
                              exit_no_gpu);
        if (world.rank() == 0)
            std::printf("device cuda | %d GPU(s) on this machine | rank 0 on GPU %d: %s | activations between "
                        "ranks through host memory (comm::host_staged)\n",
                        gpus, device, weft::cuda::device_name(device).c_str());
        return weft::exec::cuda(device);
    };
    train(staged, o, make_backend, [device](auto& w) {
        const double peak = weft::cuda::bf16_peak_tflops(device);
        weft::require(peak > 0, "--peak-tflops", 0,
                      "must be given for GPU \"" + weft::cuda::device_name(device) +
                          "\", which is not in weft's table of bf16 peaks (weft/exec/cuda/peak_flops.hpp)");
        if (w.rank() == 0) std::printf("MFU is against the GPU's dense bf16 peak of %.1f TFLOP/s\n", peak);
        return peak;
    });
}

}  // namespace

void train_on_cuda(weft::comm::local& world, const run_options& o) { train_on_gpu(world, o, world.rank()); }

#if WEFT_HAS_MPI
void train_on_cuda(weft::comm::mpi& world, const run_options& o) {
    const int local_rank = launcher_local_rank();
    train_on_gpu(world, o, local_rank >= 0 ? local_rank : world.rank());
}
#endif

}  // namespace weft_examples::train_gpt
