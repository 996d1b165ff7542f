// train_gpt --device cuda: the same run as on the CPU (train_gpt_run.hpp), each rank computing
// on one GPU with exec::cuda. Defined in train_gpt_cuda_device.cpp, which is compiled (and
// WEFT_TRAIN_GPT_CUDA set) only where the CUDA toolkit is.
#pragma once

#include "train_gpt_run.hpp"
#include "weft/comm/local.hpp"
#if WEFT_HAS_MPI
#include "weft/comm/mpi.hpp"
#endif

namespace weft_examples::train_gpt {

// Ranks as threads of this process: rank r computes on GPU r % (GPUs on this machine).
void train_on_cuda(weft::comm::local& world, const run_options& o);
#if WEFT_HAS_MPI
// One process per rank: the rank's local rank on its node (as mpirun tells it) picks the GPU.
void train_on_cuda(weft::comm::mpi& world, const run_options& o);
#endif

}  // namespace weft_examples::train_gpt
