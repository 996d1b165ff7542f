// What device code that also compiles with a host compiler includes first: under a CUDA
// compiler, CUDA's built-ins; under a host compiler, their emulation (simt_emulation.hpp),
// which runs the same kernels on the CPU in tests. Kernels that compile both ways declare
// their dynamic shared memory with WEFT_DYNAMIC_SHARED_MEMORY and keep any PTX in
// `#if defined(__CUDACC__)` wrappers whose other branch calls the emulation.
#pragma once

#include <cuda_runtime_api.h>

#if defined(__CUDACC__)
#define WEFT_DYNAMIC_SHARED_MEMORY(name) extern __shared__ __align__(128) unsigned char name[]
// A kernel in a header that is no template must be `inline`: without it, two translation units
// that include the header both define the kernel's host stub, and the link fails. nvcc 13 warns
// (#20050) that it ignores `inline` on a __global__ function, yet keeps the stub's inline
// linkage; these two silence that one warning around such kernels and nowhere else.
#define WEFT_BEGIN_INLINE_KERNELS _Pragma("nv_diagnostic push") _Pragma("nv_diag_suppress 20050")
#define WEFT_END_INLINE_KERNELS _Pragma("nv_diagnostic pop")
#else
#include <vector_functions.h>  // make_uint4 and its kin, which nvcc includes of itself

#include "weft/exec/cuda/simt_emulation.hpp"
#define WEFT_DYNAMIC_SHARED_MEMORY(name) unsigned char* const name = ::weft::exec::cuda_detail::simt::dynamic_shared_memory()
#define WEFT_BEGIN_INLINE_KERNELS
#define WEFT_END_INLINE_KERNELS
// A kernel's __shared__ variable is one per block: here a static, one for all the host threads
// that run the block (the emulation runs one block, of one launch, at a time). CUDA's host
// headers make __shared__ nothing for a host compiler, which would give each thread its own.
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#endif
