// weft's own CUDA kernels at GPT-2 124M training shapes (16 x 1024 tokens, C = 768,
// 12 heads, vocab 50304): time per call and achieved memory bandwidth, and TFLOP/s for
// attention: the flash kernels on tensor cores that exec::cuda runs by default, the exact
// ones they replaced, and the mma.sync ones (--attention-kernel mma), for comparison; the
// embedding's weight gradient with the host's grouping of its rows by token. Exits 77
// without a GPU.
#include <cuda_bf16.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "weft/exec/cuda/column_sums_layout.hpp"
#include "weft/exec/cuda/kernels/adamw.cuh"
#include "weft/exec/cuda/kernels/attention.cuh"
#include "weft/exec/cuda/kernels/bias_grad.cuh"
#include "weft/exec/cuda/kernels/cross_entropy.cuh"
#include "weft/exec/cuda/kernels/embedding.cuh"
#include "weft/exec/cuda/kernels/flash_attention.cuh"
#include "weft/exec/cuda/kernels/flash_attention_mma.cuh"
#include "weft/exec/cuda/kernels/gelu.cuh"
#include "weft/exec/cuda/kernels/layer_norm.cuh"
#include "weft/exec/token_groups.hpp"
#include "weft/gpu/device_buffer.hpp"
#include "weft/gpu/stream.hpp"

namespace cu = weft::exec::cuda_detail;
namespace gpu = weft::gpu;
using cu::bf16;

namespace {

void row(const char* name, double ms, double bytes, double flops = 0) {
    std::printf("%-28s %9.3f ms %9.1f GB/s", name, ms, bytes / (ms * 1e-3) / 1e9);
    if (flops > 0) std::printf(" %9.1f TFLOP/s", flops / (ms * 1e-3) / 1e12);
    std::printf("\n");
}

}  // namespace

int main() {
    try {
        if (!weft_bench::have_gpu()) return 77;
        constexpr int B = 16, T = 1024, C = 768, H = 12, hd = C / H, V = 50304, N = B * T;
        constexpr std::size_t params = 124'475'904;  // GPT-2 124M with the padded vocab
        std::printf("device: %s; B=%d T=%d C=%d heads=%d vocab=%d\n", gpu::device_name(0).c_str(), B, T, C, H, V);
        gpu::stream s;
        const std::size_t NC = std::size_t(N) * C;

        gpu::device_buffer<bf16> x(NC), y(NC), dy(NC), dx(NC), gamma(C), beta(C);
        gpu::device_buffer<float> mean(N), rstd(N), dgamma(C), dbeta(C);
        weft_bench::fill(x.data(), NC, 1);
        weft_bench::fill(dy.data(), NC, 2);
        weft_bench::fill(gamma.data(), C, 3);
        weft_bench::fill(beta.data(), C, 4);
        dgamma.fill_zero();
        dbeta.fill_zero();
        row("layer_norm_forward", weft_bench::time_ms(s, 3, 20, [&] {
                cu::layer_norm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), N, C,
                                       1e-5f, s);
            }),
            2.0 * NC * 2);
        row("layer_norm_backward_input", weft_bench::time_ms(s, 3, 20, [&] {
                cu::layer_norm_backward_input(x.data(), mean.data(), rstd.data(), gamma.data(), dy.data(), dx.data(),
                                              N, C, s);
            }),
            3.0 * NC * 2);
        // The column sums' scratch, sized for the widest of them (bias_grad over N x 4C).
        gpu::device_buffer<float> partials(cu::column_sum_scratch_floats(N, 4 * C, 2));
        row("layer_norm_backward_weight", weft_bench::time_ms(s, 3, 20, [&] {
                cu::layer_norm_backward_weight(x.data(), mean.data(), rstd.data(), dy.data(), dgamma.data(),
                                               dbeta.data(), partials.data(), N, C, s);
            }),
            2.0 * NC * 2);
        row("bias_grad (N x C)", weft_bench::time_ms(s, 3, 20, [&] {
                cu::bias_grad(dy.data(), dgamma.data(), partials.data(), N, C, s);
            }),
            1.0 * NC * 2);

        const std::size_t NF = 4 * NC;
        gpu::device_buffer<bf16> h(NF), g(NF), dg(NF);
        weft_bench::fill(h.data(), NF, 5);
        weft_bench::fill(dg.data(), NF, 6);
        row("gelu_forward (N x 4C)", weft_bench::time_ms(s, 3, 20, [&] { cu::gelu_forward(h.data(), g.data(), NF, s); }),
            2.0 * NF * 2);
        row("gelu_backward (N x 4C)",
            weft_bench::time_ms(s, 3, 20, [&] { cu::gelu_backward(h.data(), dg.data(), g.data(), NF, s); }),
            3.0 * NF * 2);
        gpu::device_buffer<float> dbias(4 * C);
        dbias.fill_zero();
        row("bias_grad (N x 4C)", weft_bench::time_ms(s, 3, 20, [&] {
                cu::bias_grad(dg.data(), dbias.data(), partials.data(), N, 4 * C, s);
            }),
            1.0 * NF * 2);

        gpu::device_buffer<bf16> qkv(3 * NC), att(NC), datt(NC), dqkv(3 * NC);
        gpu::device_buffer<float> lse(std::size_t(B) * H * T), delta(lse.size());
        weft_bench::fill(qkv.data(), qkv.size(), 7);
        weft_bench::fill(datt.data(), datt.size(), 8);
        const double attention_flops = 2.0 * 2.0 * B * H * (double(T) * (T + 1) / 2) * hd;  // q k^T and p v, causal
        // Backward's useful work is 2.5 times forward's (five products to two), whatever a
        // kernel recomputes.
        const double forward_bytes = 3.0 * NC * 2 + NC * 2;           // qkv read, out written
        const double backward_bytes = 2.0 * 3 * NC * 2 + 2 * NC * 2;  // qkv, dqkv; out, dout
        row("flash_attention_forward", weft_bench::time_ms(s, 3, 20, [&] {
                cu::flash_attention_forward(qkv.data(), att.data(), lse.data(), B, T, H, hd, s);
            }),
            forward_bytes, attention_flops);
        row("flash_attention_backward", weft_bench::time_ms(s, 3, 20, [&] {
                cu::flash_attention_backward(qkv.data(), att.data(), datt.data(), lse.data(), delta.data(),
                                             dqkv.data(), B, T, H, hd, s);
            }),
            backward_bytes, 2.5 * attention_flops);
        row("exact attention_forward", weft_bench::time_ms(s, 1, 3, [&] {
                cu::attention_forward(qkv.data(), att.data(), lse.data(), B, T, H, hd, s);
            }),
            forward_bytes, attention_flops);
        row("exact attention_backward", weft_bench::time_ms(s, 1, 3, [&] {
                cu::attention_backward(qkv.data(), att.data(), datt.data(), lse.data(), delta.data(), dqkv.data(), B,
                                       T, H, hd, s);
            }),
            backward_bytes, 2.5 * attention_flops);

        const std::size_t NV = std::size_t(N) * V;
        gpu::device_buffer<bf16> logits(NV), dlogits(NV);
        gpu::device_buffer<std::int32_t> labels(N);
        gpu::device_buffer<float> losses(N), loss(1);
        weft_bench::fill(logits.data(), NV, 9, 4.0f);
        labels.fill_zero();
        row("cross_entropy fwd+bwd (N x V)", weft_bench::time_ms(s, 3, 10, [&] {
                cu::cross_entropy_forward_backward(logits.data(), labels.data(), losses.data(), dlogits.data(), N, V,
                                                   1.0f, s);
                cu::mean(losses.data(), N, loss.data(), s);
            }),
            2.0 * NV * 2);

        // The embedding's weight gradient: the host groups the rows by token (a counting sort
        // over the vocabulary), then one block per token that occurs sums its rows.
        std::vector<std::int32_t> tokens(static_cast<std::size_t>(N));
        for (int i = 0; i < N; ++i) tokens[std::size_t(i)] = std::int32_t((std::uint32_t(i) * 2654435761u) % V);
        constexpr int grouping_runs = 20;
        std::vector<std::int32_t> groups;
        const auto grouping_start = std::chrono::steady_clock::now();
        for (int i = 0; i < grouping_runs; ++i) groups = weft::exec::group_rows_by_token(tokens, 0, V);
        const double grouping_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - grouping_start).count() /
            grouping_runs;
        std::printf("%-28s %9.3f ms (host, %d distinct tokens)\n", "group_rows_by_token", grouping_ms, groups[0]);
        const gpu::device_buffer<std::int32_t> device_groups{std::span<const std::int32_t>(groups)};
        gpu::device_buffer<float> dwte(std::size_t(V) * C), dwpe(std::size_t(T) * C);
        dwte.fill_zero();
        dwpe.fill_zero();
        // dy read twice (tokens, positions), each touched wte row and wpe read and written.
        const auto embedding_bytes = [&](const std::vector<std::int32_t>& g) {
            return 2.0 * NC * 2 + 2.0 * double(g[0]) * C * 4 + 2.0 * T * C * 4;
        };
        row("embedding_backward (N x C)", weft_bench::time_ms(s, 3, 20, [&] {
                cu::embedding_backward(device_groups.data(), dy.data(), dwte.data(), dwpe.data(), B, T, C, V, s);
            }),
            embedding_bytes(groups));
        // Text's ids are skewed (a few tokens are most of a batch): log-uniform ids, so token 0
        // alone has about 6 % of the rows, the ten most frequent about 20 %.
        std::vector<std::int32_t> skewed_tokens(static_cast<std::size_t>(N));
        for (int i = 0; i < N; ++i) {
            const double u = double((std::uint32_t(i) * 2654435761u) % 1000003u) / 1000003.0;
            skewed_tokens[std::size_t(i)] = std::int32_t(std::pow(double(V), u)) - 1;
        }
        const std::vector<std::int32_t> skewed = weft::exec::group_rows_by_token(skewed_tokens, 0, V);
        const gpu::device_buffer<std::int32_t> device_skewed{std::span<const std::int32_t>(skewed)};
        std::printf("(skewed ids: %d distinct)\n", skewed[0]);
        row("embedding_backward, skewed", weft_bench::time_ms(s, 3, 20, [&] {
                cu::embedding_backward(device_skewed.data(), dy.data(), dwte.data(), dwpe.data(), B, T, C, V, s);
            }),
            embedding_bytes(skewed));

        gpu::device_buffer<float> p(params), grad(params), m(params), v(params);
        gpu::device_buffer<bf16> p16(params);
        gpu::device_buffer<cu::adamw_state> state(1);
        weft_bench::fill(p.data(), params, 10, 0.02f);
        weft_bench::fill(grad.data(), params, 11, 1e-3f);
        m.fill_zero();
        v.fill_zero();
        cu::adamw_state_init(state.data(), 6e-4, 0.9, 0.95, 1e-8, 0.1);
        row("adamw (124M params)", weft_bench::time_ms(s, 3, 20, [&] {
                cu::adamw_begin_step(state.data(), s);
                cu::adamw_update(p.data(), grad.data(), m.data(), v.data(), p16.data(), params, true, state.data(), s);
            }),
            double(params) * (16 + 12 + 2));

        // Last, so that a fault leaves every row above printed: the mma.sync attention kernels
        // (flash_attention_mma.cuh), not yet exec::cuda's default.
        row("flash_attention_mma_forward", weft_bench::time_ms(s, 3, 20, [&] {
                cu::flash_attention_mma_forward(qkv.data(), att.data(), lse.data(), B, T, H, hd, s);
            }),
            forward_bytes, attention_flops);
        row("flash_attention_mma_backward", weft_bench::time_ms(s, 3, 20, [&] {
                cu::flash_attention_mma_backward(qkv.data(), att.data(), datt.data(), lse.data(), delta.data(),
                                                 dqkv.data(), B, T, H, hd, s);
            }),
            backward_bytes, 2.5 * attention_flops);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_kernels: %s\n", e.what());
        return 1;
    }
}
