// cuBLASLt bf16 GEMM throughput (fp32 accumulate) at the shapes of a GPT-2 124M and
// 350M training step, forward and both backward GEMMs, with MFU against the GPU's
// dense bf16 peak. Prints a table; exits 77 without a GPU.
//   bench_cuda_gemm [tokens]     (default 16384 = 16 sequences of 1024)
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "weft/exec/cuda/gemm.hpp"
#include "weft/gpu/device_buffer.hpp"
#include "weft/gpu/stream.hpp"

namespace cu = weft::exec::cuda_detail;
namespace gpu = weft::gpu;

namespace {

struct linear_shape {
    const char* name;
    int in, out;
    int per_model;  // how many of it a step runs: per layer x layers, or 1
};

struct result {
    double flops = 0, ms = 0;
};

}  // namespace

int main(int argc, char** argv) {
    try {
        if (!weft_bench::have_gpu()) return 77;
        const int tokens = argc > 1 ? std::atoi(argv[1]) : 16384;
        if (tokens <= 0) {
            std::fprintf(stderr, "tokens = %s is invalid: must be a positive integer\n", argv[1]);
            return 2;
        }
        const std::string device = gpu::device_name(0);
        const double peak = weft_bench::bf16_peak_tflops(device);
        std::printf("device: %s, dense bf16 peak %s TFLOP/s, tokens per step %d\n", device.c_str(),
                    peak > 0 ? std::to_string(int(peak)).c_str() : "unknown", tokens);

        constexpr int vocab = 50304;  // GPT-2's 50257 padded to a multiple of 128, as llm.c
        gpu::stream stream;
        cu::gemm gemm;

        struct model {
            const char* name;
            int layers, channels;
        };
        double best_tflops = 0;
        for (const model& m : {model{"gpt2-124M", 12, 768}, model{"gpt2-350M", 24, 1024}}) {
            const int C = m.channels;
            const std::vector<linear_shape> shapes = {{"attn.c_attn", C, 3 * C, m.layers},
                                                      {"attn.c_proj", C, C, m.layers},
                                                      {"mlp.c_fc", C, 4 * C, m.layers},
                                                      {"mlp.c_proj", 4 * C, C, m.layers},
                                                      {"lm_head", C, vocab, 1}};
            std::printf("\n%-10s %-12s %-9s %6s %6s %6s %9s %9s %6s\n", m.name, "layer", "pass", "M", "N", "K", "ms",
                        "TFLOP/s", "MFU");
            double step_flops = 0, step_ms = 0;
            for (const linear_shape& s : shapes) {
                const std::size_t rows = std::size_t(tokens);
                gpu::device_buffer<cu::bf16> x(rows * s.in), w(std::size_t(s.in) * s.out), dy(rows * s.out),
                    y(rows * s.out), dx(rows * s.in), bias(std::size_t(s.out));
                gpu::device_buffer<float> dw(std::size_t(s.in) * s.out);
                weft_bench::fill(x.data(), x.size(), 1);
                weft_bench::fill(w.data(), w.size(), 2, 0.02f);
                weft_bench::fill(dy.data(), dy.size(), 3, 1e-3f);
                weft_bench::fill(bias.data(), bias.size(), 4, 0.02f);
                dw.fill_zero();
                const double flops = 2.0 * double(rows) * s.in * s.out;
                struct pass {
                    const char* name;
                    int M, N, K;
                    double ms;
                };
                std::vector<pass> passes = {
                    {"fwd+bias", tokens, s.out, s.in,
                     weft_bench::time_ms(stream, 3, 20, [&] {
                         gemm.linear_forward(x.data(), w.data(), bias.data(), y.data(), tokens, s.in, s.out, stream);
                     })},
                    {"bwd dX", tokens, s.in, s.out,
                     weft_bench::time_ms(stream, 3, 20, [&] {
                         gemm.linear_backward_input(dy.data(), w.data(), dx.data(), tokens, s.in, s.out, stream);
                     })},
                    {"bwd dW+=", s.in, s.out, tokens, weft_bench::time_ms(stream, 3, 20, [&] {
                         gemm.linear_backward_weight(x.data(), dy.data(), dw.data(), tokens, s.in, s.out, stream);
                     })}};
                const auto print_pass = [&](const pass& p) {
                    const double tflops = flops / (p.ms * 1e-3) / 1e12;
                    char mfu[16] = "n/a";
                    if (peak > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * tflops / peak);
                    std::printf("%-10s %-12s %-9s %6d %6d %6d %9.3f %9.1f %6s\n", "", s.name, p.name, p.M, p.N, p.K,
                                p.ms, tflops, mfu);
                    return tflops;
                };
                for (const pass& p : passes) {
                    best_tflops = std::max(best_tflops, print_pass(p));
                    step_flops += flops * s.per_model;
                    step_ms += p.ms * s.per_model;
                }
                // The MLP's GELU rides in these GEMMs' cuBLASLt epilogues in a training step
                // (exec::fused_kernels): c_fc's forward writes the pre-activation and GELU of
                // it, c_proj's input gradient goes through GELU's gradient. Timed apart from
                // the step's total above, which stays the plain GEMMs'; where cuBLASLt has no
                // algorithm, the step runs the plain GEMM and GELU's own kernel.
                const std::string name = s.name;
                if (name == "mlp.c_fc" || name == "mlp.c_proj") {
                    const bool forward = name == "mlp.c_fc";
                    gpu::device_buffer<cu::bf16> pre_act(forward ? rows * s.out : rows * s.in);
                    weft_bench::fill(pre_act.data(), pre_act.size(), 5);
                    const auto run = [&] {
                        return forward ? gemm.linear_gelu_forward(x.data(), w.data(), bias.data(), y.data(),
                                                                  pre_act.data(), tokens, s.in, s.out, stream)
                                       : gemm.linear_backward_input_gelu(dy.data(), w.data(), pre_act.data(),
                                                                         dx.data(), tokens, s.in, s.out, stream);
                    };
                    const char* pass_name = forward ? "fwd+GELU" : "dX*GELU'";
                    if (run()) {
                        const pass& plain = passes[forward ? 0 : 1];
                        print_pass({pass_name, plain.M, plain.N, plain.K,
                                    weft_bench::time_ms(stream, 3, 20, [&] { (void)run(); })});
                    } else {
                        std::printf("%-10s %-12s %-9s no cuBLASLt algorithm: the step runs GELU's own kernel\n", "",
                                    s.name, pass_name);
                    }
                }
            }
            const double tflops = step_flops / (step_ms * 1e-3) / 1e12;
            std::printf("%-10s all GEMMs of one step: %.2f ms, %.1f TFLOP/s", m.name, step_ms, tflops);
            if (peak > 0) std::printf(", MFU %.1f%%", 100.0 * tflops / peak);
            std::printf("\n");
        }
        // What scripts/gpu-check.sh compares the attention kernel with.
        std::printf("best GEMM: %.1f TFLOP/s\n", best_tflops);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_gemm: %s\n", e.what());
        return 1;
    }
}
