// Causal multi-head self-attention, forward and backward, straightforward and exact
// (not flash): one block per (query row, head, batch) with the row's scores in
// shared memory, warps over keys, lanes over the head dimension. The backward
// recomputes probabilities from the saved log-sum-exp and writes dq, dk, dv in
// separate kernels without atomics, so results are bit-reproducible.
//
// Layout as GPT-2's c_attn: qkv [batch*seq, 3*C] holds q, k, v concatenated along
// the feature dim, head h at columns h*head_dim; out and dout [batch*seq, C];
// lse and delta [batch, heads, seq] fp32.
#pragma once

#include <cuda_runtime_api.h>
#include <math_constants.h>

#include <cstddef>
#include <string>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/reduce.cuh"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

namespace detail {

constexpr int attention_threads = 128;
constexpr int attention_warps = attention_threads / 32;
constexpr int attention_max_per_lane = 4;  // head_dim <= 128

struct attention_shape {
    int seq, heads, head_dim;
    [[nodiscard]] __device__ int channels() const { return heads * head_dim; }
    // Row of token t of batch b in the [batch*seq, *] matrices.
    [[nodiscard]] __device__ std::size_t row(int b, int t) const { return std::size_t(b) * seq + t; }
    [[nodiscard]] __device__ std::size_t stat(int b, int h, int t) const {
        return (std::size_t(b) * heads + h) * seq + t;
    }
};

// The lane's slice of a head vector: elements lane, lane+32, ... (compile-time indexed).
template <class T>
__device__ inline void load_head(const T* p, int head_dim, float (&v)[attention_max_per_lane]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < attention_max_per_lane; ++k) v[k] = 32 * k < head_dim ? to_float(p[lane + 32 * k]) : 0.0f;
}

template <class T>
__device__ inline float dot_head(const float (&a)[attention_max_per_lane], const T* p, int head_dim) {
    const int lane = threadIdx.x % 32;
    float s = 0;
#pragma unroll
    for (int k = 0; k < attention_max_per_lane; ++k)
        if (32 * k < head_dim) s += a[k] * to_float(p[lane + 32 * k]);
    return warp_sum(s);
}

// Adds the warps' partial head vectors in warp order and leaves the total with warp 0.
__device__ inline void combine_warps(float (&acc)[attention_max_per_lane], float* shared, int head_dim) {
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < attention_max_per_lane; ++k)
        if (32 * k < head_dim) shared[warp * head_dim + lane + 32 * k] = acc[k];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int k = 0; k < attention_max_per_lane; ++k) {
            if (32 * k >= head_dim) continue;
            float total = 0;
            for (int w = 0; w < attention_warps; ++w) total += shared[w * head_dim + lane + 32 * k];
            acc[k] = total;
        }
    }
}

template <class T>
__global__ void attention_forward_kernel(const T* qkv, T* out, float* lse, attention_shape shape, float scale) {
    extern __shared__ float shared[];  // scores [seq], then warp partials [warps * head_dim]
    float* scores = shared;
    float* partials = shared + shape.seq;
    __shared__ float scratch[32];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int C = shape.channels(), hd = shape.head_dim;
    const std::size_t stride = 3 * std::size_t(C);

    float q[attention_max_per_lane];
    load_head(qkv + shape.row(b, i) * stride + h * hd, hd, q);
    for (int j = warp; j <= i; j += attention_warps) {
        const float s = dot_head(q, qkv + shape.row(b, j) * stride + C + h * hd, hd) * scale;
        if (lane == 0) scores[j] = s;
    }
    __syncthreads();
    float m = -CUDART_INF_F;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, scores[j]);
    m = block_max(m, scratch);
    float sum = 0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float e = expf(scores[j] - m);
        scores[j] = e;
        sum += e;
    }
    sum = block_sum(sum, scratch);  // its barriers also publish the exponentials

    float acc[attention_max_per_lane] = {};
    for (int j = warp; j <= i; j += attention_warps) {
        const float p = scores[j];
        const T* v = qkv + shape.row(b, j) * stride + 2 * C + h * hd;
#pragma unroll
        for (int k = 0; k < attention_max_per_lane; ++k)
            if (32 * k < hd) acc[k] += p * to_float(v[lane + 32 * k]);
    }
    combine_warps(acc, partials, hd);
    if (warp == 0) {
        T* o = out + shape.row(b, i) * C + h * hd;
        const float inv = 1.0f / sum;
#pragma unroll
        for (int k = 0; k < attention_max_per_lane; ++k)
            if (32 * k < hd) o[lane + 32 * k] = from_float<T>(acc[k] * inv);
        if (lane == 0) lse[shape.stat(b, h, i)] = m + logf(sum);
    }
}

// dq_i = scale * sum_j ds_ij k_j, with ds_ij = p_ij (dout_i . v_j - delta_i) and
// delta_i = dout_i . out_i (written for the dk/dv kernel).
template <class T>
__global__ void attention_backward_query_kernel(const T* qkv, const T* out, const T* dout, const float* lse,
                                                float* delta, T* dqkv, attention_shape shape, float scale) {
    extern __shared__ float partials[];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int C = shape.channels(), hd = shape.head_dim;
    const std::size_t stride = 3 * std::size_t(C);

    float q[attention_max_per_lane], d_out[attention_max_per_lane];
    load_head(qkv + shape.row(b, i) * stride + h * hd, hd, q);
    load_head(dout + shape.row(b, i) * C + h * hd, hd, d_out);
    const float d_i = dot_head(d_out, out + shape.row(b, i) * C + h * hd, hd);  // same in every warp
    const float lse_i = lse[shape.stat(b, h, i)];
    if (threadIdx.x == 0) delta[shape.stat(b, h, i)] = d_i;

    float acc[attention_max_per_lane] = {};
    for (int j = warp; j <= i; j += attention_warps) {
        const T* k_j = qkv + shape.row(b, j) * stride + C + h * hd;
        const float p = expf(dot_head(q, k_j, hd) * scale - lse_i);
        const float dp = dot_head(d_out, qkv + shape.row(b, j) * stride + 2 * C + h * hd, hd);
        const float ds = p * (dp - d_i);
#pragma unroll
        for (int k = 0; k < attention_max_per_lane; ++k)
            if (32 * k < hd) acc[k] += ds * to_float(k_j[lane + 32 * k]);
    }
    combine_warps(acc, partials, hd);
    if (warp == 0) {
        T* dq = dqkv + shape.row(b, i) * stride + h * hd;
#pragma unroll
        for (int k = 0; k < attention_max_per_lane; ++k)
            if (32 * k < hd) dq[lane + 32 * k] = from_float<T>(acc[k] * scale);
    }
}

// dk_j = scale * sum_{i>=j} ds_ij q_i and dv_j = sum_{i>=j} p_ij dout_i.
template <class T>
__global__ void attention_backward_key_value_kernel(const T* qkv, const T* dout, const float* lse,
                                                    const float* delta, T* dqkv, attention_shape shape, float scale) {
    extern __shared__ float partials[];
    const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int C = shape.channels(), hd = shape.head_dim;
    const std::size_t stride = 3 * std::size_t(C);

    float k_j[attention_max_per_lane], v_j[attention_max_per_lane];
    load_head(qkv + shape.row(b, j) * stride + C + h * hd, hd, k_j);
    load_head(qkv + shape.row(b, j) * stride + 2 * C + h * hd, hd, v_j);
    float dk[attention_max_per_lane] = {}, dv[attention_max_per_lane] = {};
    for (int i = j + warp; i < shape.seq; i += attention_warps) {
        const T* q_i = qkv + shape.row(b, i) * stride + h * hd;
        const T* dout_i = dout + shape.row(b, i) * C + h * hd;
        const float p = expf(dot_head(k_j, q_i, hd) * scale - lse[shape.stat(b, h, i)]);
        const float dp = dot_head(v_j, dout_i, hd);
        const float ds = p * (dp - delta[shape.stat(b, h, i)]);
#pragma unroll
        for (int k = 0; k < attention_max_per_lane; ++k) {
            if (32 * k >= hd) continue;
            dk[k] += ds * to_float(q_i[lane + 32 * k]);
            dv[k] += p * to_float(dout_i[lane + 32 * k]);
        }
    }
    combine_warps(dk, partials, hd);
    combine_warps(dv, partials, hd);  // starts with a barrier: warp 0 has read dk's partials
    if (warp == 0) {
        T* out_k = dqkv + shape.row(b, j) * stride + C + h * hd;
        T* out_v = out_k + C;
#pragma unroll
        for (int k = 0; k < attention_max_per_lane; ++k) {
            if (32 * k >= hd) continue;
            out_k[lane + 32 * k] = from_float<T>(dk[k] * scale);
            out_v[lane + 32 * k] = from_float<T>(dv[k]);
        }
    }
}

inline void require_attention_shape(int batch, int seq, int heads, int head_dim, const char* what) {
    const std::string name(what);
    require(batch > 0 && batch <= 65535, name + ": batch", batch, "must be in [1, 65535]");
    require(heads > 0 && heads <= 65535, name + ": heads", heads, "must be in [1, 65535]");
    // The row's scores live in shared memory next to the warps' partials (48 KiB).
    require(seq > 0 && seq <= 8192, name + ": seq", seq, "must be in [1, 8192]");
    require(head_dim > 0 && head_dim % 32 == 0 && head_dim <= 32 * attention_max_per_lane, name + ": head_dim",
            head_dim, "must be a multiple of 32 in [32, 128]");
}

}  // namespace detail

// out = softmax(mask(q k^T / sqrt(head_dim))) v per (batch, head); lse saved for backward.
template <class T>
void attention_forward(const T* qkv, T* out, float* lse, int batch, int seq, int heads, int head_dim,
                       cudaStream_t stream) {
    detail::require_attention_shape(batch, seq, heads, head_dim, "attention_forward");
    const detail::attention_shape shape{seq, heads, head_dim};
    const std::size_t shared = (std::size_t(seq) + detail::attention_warps * head_dim) * sizeof(float);
    detail::attention_forward_kernel<<<dim3(seq, heads, batch), detail::attention_threads, shared, stream>>>(
        qkv, out, lse, shape, 1.0f / sqrtf(float(head_dim)));
    gpu::check(cudaGetLastError(), "attention_forward kernel launch");
}

// dqkv (same layout as qkv) is written whole; delta [batch, heads, seq] is scratch.
template <class T>
void attention_backward(const T* qkv, const T* out, const T* dout, const float* lse, float* delta, T* dqkv, int batch,
                        int seq, int heads, int head_dim, cudaStream_t stream) {
    detail::require_attention_shape(batch, seq, heads, head_dim, "attention_backward");
    const detail::attention_shape shape{seq, heads, head_dim};
    const float scale = 1.0f / sqrtf(float(head_dim));
    const std::size_t shared = std::size_t(detail::attention_warps) * head_dim * sizeof(float);
    const dim3 grid(seq, heads, batch);
    detail::attention_backward_query_kernel<<<grid, detail::attention_threads, shared, stream>>>(
        qkv, out, dout, lse, delta, dqkv, shape, scale);
    gpu::check(cudaGetLastError(), "attention_backward (queries) kernel launch");
    detail::attention_backward_key_value_kernel<<<grid, detail::attention_threads, shared, stream>>>(
        qkv, dout, lse, delta, dqkv, shape, scale);
    gpu::check(cudaGetLastError(), "attention_backward (keys, values) kernel launch");
}

}  // namespace weft::exec::cuda_detail
