// What device code that also compiles with a host compiler includes first: under a CUDA
// compiler, CUDA's built-ins; under a host compiler, their emulation (simt_emulation.hpp),
// which runs the same kernels on the CPU in tests. Kernels that compile both ways declare
// their dynamic shared memory with WEFT_DYNAMIC_SHARED_MEMORY and keep any PTX in
// `#if defined(__CUDACC__)` wrappers whose other branch calls the emulation.
#pragma once

#include <cuda_runtime_api.h>

#if defined(__CUDACC__)
#define WEFT_DYNAMIC_SHARED_MEMORY(name) extern __shared__ __align__(128) unsigned char name[]
#else
#include <vector_functions.h>  // make_uint4 and its kin, which nvcc includes of itself

#include "weft/exec/cuda/simt_emulation.hpp"
#define WEFT_DYNAMIC_SHARED_MEMORY(name) unsigned char* const name = ::weft::cuda::simt::dynamic_shared_memory()
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#endif
