// The storage types of weft's kernels (float and bf16) and the load/store helpers every kernel
// uses, so that arithmetic is fp32 whatever the storage type. Host and device functions:
// they compile with a host compiler too (device_or_emulated.cuh).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

namespace weft::exec::cuda_detail {

using bf16 = __nv_bfloat16;

namespace detail {

__host__ __device__ inline float to_float(float v) {
    return v;
}
__host__ __device__ inline float to_float(bf16 v) {
    return __bfloat162float(v);
}

template <class T>
__host__ __device__ inline T from_float(float v) {
    if constexpr (std::is_same_v<T, bf16>) {
        return __float2bfloat16_rn(v);
    } else {
        static_assert(std::is_same_v<T, float>, "weft's CUDA kernels store float or bf16");
        return v;
    }
}

}  // namespace detail

}  // namespace weft::exec::cuda_detail
