// exec::cuda against exec::cpu, kernel by kernel of the compute_backend concept, on the same
// random inputs. The inputs are bf16 values (what exec::cuda's matrices and its GEMMs' weights
// hold), so both backends compute on the same numbers: a kernel's result then differs only by
// the GPU's rounding of its output to bf16 (bf16_*tolerances) or, for fp32 results (weight
// gradients, saved statistics, the loss), by summation order (fp32 tolerances). Host checks
// (no GPU needed) first: exec::cuda models the concept, and making one without a GPU is an
// error naming `device`. Exit 77 (skipped) without a GPU.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "device_check.hpp"
#include "weft/comm/abort_on_timeout.hpp"
#include "weft/comm/timeout.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/exec/cuda.hpp"
#include "weft/gpu/device_buffer.hpp"

namespace {

using weft_test::expect;
using weft_test::expect_close;
using cpu_backend = weft::exec::cpu;
using cpu_matrix = cpu_backend::matrix;
using gpu_backend = weft::exec::cuda;
using gpu_matrix = gpu_backend::matrix;

static_assert(weft::compute_backend<gpu_backend>);
static_assert(std::is_same_v<gpu_backend::memory_space, weft::device_space>);

// The bf16 value nearest to v (ties to even), as a float: exact in both backends.
float bf16_value(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

cpu_matrix random_matrix(int rows, int cols, unsigned seed, float scale = 1.0f) {
    std::mt19937 generator(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    cpu_matrix m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = bf16_value(normal(generator));
    return m;
}

std::vector<float> random_values(std::size_t n, unsigned seed, float scale = 1.0f) {
    const cpu_matrix m = random_matrix(1, static_cast<int>(n), seed, scale);
    return {m.data(), m.data() + m.size()};
}

gpu_matrix upload(gpu_backend& gpu, const cpu_matrix& m) {
    gpu_matrix d(static_cast<int>(m.rows()), static_cast<int>(m.cols()));
    gpu.copy_from_host(std::span<const float>(m.data(), std::size_t(m.size())), d);
    return d;
}

std::vector<float> download(gpu_backend& gpu, const gpu_matrix& d) {
    std::vector<float> host(d.size());
    gpu.copy_to_host(d, host);
    return host;
}

std::vector<float> values(const cpu_matrix& m) { return {m.data(), m.data() + m.size()}; }

// The first n floats of a matrix's storage: exec::cuda keeps fp32 statistics in its bf16
// matrices (two elements per float).
std::vector<float> download_floats(gpu_backend& gpu, const gpu_matrix& d, std::size_t n) {
    expect(d.size() * sizeof(gpu_matrix::value_type) >= n * sizeof(float),
           "the matrix holds " + std::to_string(n) + " floats");
    std::vector<float> host(n);
    gpu.synchronize();
    weft::gpu::check(cudaMemcpy(host.data(), d.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
                      "cudaMemcpy (saved statistics to host)");
    return host;
}
// Device copies of host values: weights and gradients live in device memory.
struct device_values {
    weft::gpu::device_buffer<float> buffer;
    explicit device_values(const std::vector<float>& host) : buffer(std::span<const float>(host)) {}
    std::span<const float> view() const { return {buffer.data(), buffer.size()}; }
    std::span<float> span() { return {buffer.data(), buffer.size()}; }
    std::vector<float> host() const { return buffer.to_host(); }
};

// A bf16 result is the exact one rounded to 8 significant bits: within 2^-9 relative, plus
// what the fp32 arithmetic before the rounding adds.
constexpr float bf16_rtol = 8e-3f, bf16_atol = 1e-5f;
constexpr float gemm_rtol = 1e-2f, gemm_atol = 1e-2f;  // bf16 output of fp32 sums that cancel
constexpr float fp32_rtol = 1e-4f, fp32_atol = 1e-5f;

void test_linear(gpu_backend& gpu, cpu_backend& cpu, int rows, int in, int out) {
    const std::string shape = " (" + std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out) + ")";
    const cpu_matrix x = random_matrix(rows, in, 1);
    const cpu_matrix dy = random_matrix(rows, out, 2);
    const auto w = random_values(std::size_t(in) * out, 3, 0.2f);  // bf16 values: the GEMMs' weights are
    const auto b = random_values(std::size_t(out), 4);             // and the bias epilogue's bias is
    device_values dw_w(w), dw_b(b);
    const gpu_matrix gx = upload(gpu, x), gdy = upload(gpu, dy);

    expect_close("linear_forward" + shape, download(gpu, gpu.linear_forward(gx, dw_w.view(), dw_b.view(), in, out)),
                 values(cpu.linear_forward(x, w, b, in, out)), gemm_rtol, gemm_atol);
    // An empty bias: no bias (a row-parallel layer's partial product).
    expect_close("linear_forward without bias" + shape,
                 download(gpu, gpu.linear_forward(gx, dw_w.view(), std::span<const float>(), in, out)),
                 values(cpu.linear_forward(x, w, {}, in, out)), gemm_rtol, gemm_atol);
    expect_close("linear_backward_input" + shape, download(gpu, gpu.linear_backward_input(gdy, dw_w.view(), in, out)),
                 values(cpu.linear_backward_input(dy, w, in, out)), gemm_rtol, gemm_atol);
    // Accumulates into gradients that already hold values.
    auto grad_w = random_values(w.size(), 5), grad_b = random_values(b.size(), 6);
    device_values g_w(grad_w), g_b(grad_b);
    gpu.linear_backward_weight(gx, gdy, g_w.span(), g_b.span());
    cpu.linear_backward_weight(x, dy, grad_w, grad_b);
    // fp32 gradients of bf16 inputs: exact products, fp32 sums in another order.
    expect_close("linear_backward_weight: weight" + shape, g_w.host(), grad_w, 1e-4f, 1e-4f);
    expect_close("linear_backward_weight: bias" + shape, g_b.host(), grad_b, fp32_rtol, 1e-4f);

    // The LM head's form, W stored [out, in].
    expect_close("transposed_linear_forward" + shape,
                 download(gpu, gpu.transposed_linear_forward(gx, dw_w.view(), out, in)),
                 values(cpu.transposed_linear_forward(x, w, out, in)), gemm_rtol, gemm_atol);
    expect_close("transposed_linear_backward_input" + shape,
                 download(gpu, gpu.transposed_linear_backward_input(gdy, dw_w.view(), out, in)),
                 values(cpu.transposed_linear_backward_input(dy, w, out, in)), gemm_rtol, gemm_atol);
    gpu.transposed_linear_backward_weight(gx, gdy, g_w.span());
    cpu.transposed_linear_backward_weight(x, dy, grad_w);
    expect_close("transposed_linear_backward_weight" + shape, g_w.host(), grad_w, 1e-4f, 1e-4f);
}

void test_elementwise(gpu_backend& gpu, cpu_backend& cpu) {
    const cpu_matrix a = random_matrix(33, 70, 7), b = random_matrix(33, 70, 8);
    const gpu_matrix ga = upload(gpu, a), gb = upload(gpu, b);
    expect_close("add", download(gpu, gpu.add(ga, gb)), values(cpu.add(a, b)), 4e-3f, 0);  // one rounding
    expect_close("gelu_forward", download(gpu, gpu.gelu_forward(ga)), values(cpu.gelu_forward(a)), bf16_rtol,
                 bf16_atol);
    expect_close("gelu_backward", download(gpu, gpu.gelu_backward(ga, gb)), values(cpu.gelu_backward(a, b)),
                 bf16_rtol, bf16_atol);
}

void test_layer_norm(gpu_backend& gpu, cpu_backend& cpu, int rows, int cols) {
    const cpu_matrix x = random_matrix(rows, cols, 9, 2.0f), dy = random_matrix(rows, cols, 10);
    const auto gamma = random_values(std::size_t(cols), 11), beta = random_values(std::size_t(cols), 12);
    device_values g(gamma), be(beta);
    const gpu_matrix gx = upload(gpu, x), gdy = upload(gpu, dy);
    cpu_matrix mean, rstd;
    gpu_matrix gmean, grstd;
    const cpu_matrix y = cpu.layer_norm_forward(x, gamma, beta, 1e-5f, mean, rstd);
    expect_close("layer_norm_forward", download(gpu, gpu.layer_norm_forward(gx, g.view(), be.view(), 1e-5f, gmean,
                                                                            grstd)),
                 values(y), bf16_rtol, 1e-3f);
    // The statistics stay fp32.
    expect_close("layer_norm_forward: mean", download_floats(gpu, gmean, std::size_t(rows)), values(mean), fp32_rtol,
                 fp32_atol);
    expect_close("layer_norm_forward: rstd", download_floats(gpu, grstd, std::size_t(rows)), values(rstd), fp32_rtol,
                 fp32_atol);
    expect_close("layer_norm_backward_input",
                 download(gpu, gpu.layer_norm_backward_input(gx, gmean, grstd, g.view(), gdy)),
                 values(cpu.layer_norm_backward_input(x, mean, rstd, gamma, dy)), bf16_rtol, 2e-3f);
    auto dgamma = random_values(gamma.size(), 13), dbeta = random_values(beta.size(), 14);
    device_values dg(dgamma), db(dbeta);
    gpu.layer_norm_backward_weight(gx, gmean, grstd, gdy, dg.span(), db.span());
    cpu.layer_norm_backward_weight(x, mean, rstd, dy, dgamma, dbeta);
    expect_close("layer_norm_backward_weight: weight", dg.host(), dgamma, 1e-3f, 1e-4f);
    expect_close("layer_norm_backward_weight: bias", db.host(), dbeta, 1e-3f, 1e-4f);
}

// The fused kernels (exec::fused_kernels) against exec::cpu's two-kernel forms.
void test_fused(gpu_backend& gpu, cpu_backend& cpu, int rows, int width) {
    const std::string shape = " (" + std::to_string(rows) + "x" + std::to_string(width) + ")";
    const cpu_matrix x = random_matrix(rows, width, 24);
    const auto w = random_values(std::size_t(width) * 4 * width, 25, 0.2f);
    const auto b = random_values(std::size_t(4 * width), 26);
    device_values d_w(w), d_b(b);
    cpu_matrix pre_act;
    gpu_matrix g_pre_act;
    const cpu_matrix act = cpu.linear_gelu_forward(x, w, b, width, 4 * width, pre_act);
    expect_close("linear_gelu_forward" + shape,
                 download(gpu, gpu.linear_gelu_forward(upload(gpu, x), d_w.view(), d_b.view(), width, 4 * width,
                                                       g_pre_act)),
                 values(act), gemm_rtol, gemm_atol);
    expect_close("linear_gelu_forward: pre_act" + shape, download(gpu, g_pre_act), values(pre_act), gemm_rtol,
                 gemm_atol);
    // An empty bias means none, as linear_forward's (a row-parallel layer's partial product).
    const cpu_matrix act_unbiased = cpu.linear_gelu_forward(x, w, {}, width, 4 * width, pre_act);
    expect_close("linear_gelu_forward without bias" + shape,
                 download(gpu, gpu.linear_gelu_forward(upload(gpu, x), d_w.view(), std::span<const float>(), width,
                                                       4 * width, g_pre_act)),
                 values(act_unbiased), gemm_rtol, gemm_atol);
    // The input gradient of c_proj [4 width -> width] through the GELU before it.
    const cpu_matrix dy = random_matrix(rows, width, 31), gelu_input = random_matrix(rows, 4 * width, 32);
    const auto w_proj = random_values(std::size_t(4 * width) * width, 33, 0.2f);
    device_values d_w_proj(w_proj);
    expect_close("linear_backward_input_gelu" + shape,
                 download(gpu, gpu.linear_backward_input_gelu(upload(gpu, dy), d_w_proj.view(), 4 * width, width,
                                                              upload(gpu, gelu_input))),
                 values(cpu.linear_backward_input_gelu(dy, w_proj, 4 * width, width, gelu_input)), gemm_rtol,
                 gemm_atol);

    const cpu_matrix a = random_matrix(rows, width, 27, 2.0f), r = random_matrix(rows, width, 28);
    const auto gamma = random_values(std::size_t(width), 29), beta = random_values(std::size_t(width), 30);
    device_values d_gamma(gamma), d_beta(beta);
    cpu_matrix sum, mean, rstd;
    gpu_matrix g_sum, g_mean, g_rstd;
    const cpu_matrix y = cpu.residual_layer_norm_forward(a, r, gamma, beta, 1e-5f, sum, mean, rstd);
    const gpu_matrix g_y = gpu.residual_layer_norm_forward(upload(gpu, a), upload(gpu, r), d_gamma.view(),
                                                           d_beta.view(), 1e-5f, g_sum, g_mean, g_rstd);
    expect_close("residual_layer_norm_forward: sum" + shape, download(gpu, g_sum), values(sum), 4e-3f, 0);
    // The GPU normalizes the bf16 sum it keeps, so its statistics are those of the rounded sum.
    expect_close("residual_layer_norm_forward" + shape, download(gpu, g_y), values(y), 2e-2f, 2e-2f);
    expect_close("residual_layer_norm_forward: mean" + shape, download_floats(gpu, g_mean, std::size_t(rows)),
                 values(mean), 1e-2f, 1e-2f);
    expect_close("residual_layer_norm_forward: rstd" + shape, download_floats(gpu, g_rstd, std::size_t(rows)),
                 values(rstd), 1e-2f, 1e-3f);
}

void test_cross_entropy(gpu_backend& gpu, cpu_backend& cpu, int rows, int classes) {
    const cpu_matrix logits = random_matrix(rows, classes, 15, 3.0f);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) labels[std::size_t(r)] = (r * 7919) % classes;
    cpu_matrix dlogits;
    gpu_matrix gdlogits;
    const float want = cpu.cross_entropy(logits, labels, 0.25f, dlogits);
    const float got = gpu.cross_entropy(upload(gpu, logits), labels, 0.25f, gdlogits);
    expect(std::fabs(got - want) <= 1e-5f * std::fabs(want) + 1e-6f,
           "cross_entropy loss " + std::to_string(got) + ", want " + std::to_string(want));
    expect_close("cross_entropy dlogits", download(gpu, gdlogits), values(dlogits), bf16_rtol, 1e-8f);
    // The deferred loss (exec::deferred_loss_kernels): the same kernels, read later. Kernels
    // queued after it do not change it, and reading it gives cross_entropy's loss bit for bit.
    static_assert(weft::exec::deferred_loss_kernels<gpu_backend>);
    gpu_matrix deferred_dlogits;
    const auto deferred = gpu.cross_entropy_deferred(upload(gpu, logits), labels, 0.25f, deferred_dlogits);
    expect(deferred.pending(), "cross_entropy_deferred hands out a loss still to be read");
    gpu_matrix later_dlogits;  // more work on the stream after it, which may reuse its scratch
    static_cast<void>(gpu.cross_entropy(upload(gpu, logits), labels, 2.0f, later_dlogits));
    expect(deferred.get() == got, "cross_entropy_deferred reads cross_entropy's loss, bit for bit");
    expect(download(gpu, deferred_dlogits) == download(gpu, gdlogits),
           "cross_entropy_deferred's dlogits are cross_entropy's, bit for bit");
    // A label out of range is the CPU's message, before anything runs.
    labels[1] = classes;
    bool named = false;
    try {
        static_cast<void>(gpu.cross_entropy(upload(gpu, logits), labels, 1.0f, gdlogits));
    } catch (const weft::error& e) {
        named = std::string(e.what()).find("cross_entropy: labels[1]") != std::string::npos;
    }
    expect(named, "a label out of range is refused naming cross_entropy: labels[1]");
}

void test_embedding(gpu_backend& gpu, cpu_backend& cpu, int sequences, int seq_len, int width, int vocab) {
    std::vector<std::int32_t> tokens(std::size_t(sequences) * seq_len);
    for (std::size_t n = 0; n < tokens.size(); ++n) tokens[n] = std::int32_t((n * 31 + 7) % std::size_t(vocab / 2));
    const auto wte = random_values(std::size_t(vocab) * width, 16), wpe = random_values(std::size_t(seq_len) * width, 17);
    device_values d_wte(wte), d_wpe(wpe);
    expect_close("embedding_forward",
                 download(gpu, gpu.embedding_forward(tokens, d_wte.view(), d_wpe.view(), vocab, width, seq_len)),
                 values(cpu.embedding_forward(tokens, wte, wpe, vocab, width, seq_len)), bf16_rtol, bf16_atol);
    const cpu_matrix dy = random_matrix(static_cast<int>(tokens.size()), width, 18);
    auto g_wte = random_values(wte.size(), 19), g_wpe = random_values(wpe.size(), 20);
    device_values dg_wte(g_wte), dg_wpe(g_wpe);
    gpu.embedding_backward_weight(tokens, upload(gpu, dy), dg_wte.span(), dg_wpe.span(), vocab, seq_len);
    cpu.embedding_backward_weight(tokens, dy, g_wte, g_wpe, vocab, seq_len);
    expect_close("embedding_backward_weight: wte", dg_wte.host(), g_wte, 1e-4f, 1e-5f);
    expect_close("embedding_backward_weight: wpe", dg_wpe.host(), g_wpe, 1e-4f, 1e-5f);
}

// exec::vocab_parallel_embedding_kernels over the wte rows [first_row, first_row + held): with
// `reduce` standing in for a group of two equal ranks (values doubled), the forward equals the
// host's arithmetic bit for bit (fp32 lookup and sum, wpe added in fp32, one rounding to
// bf16); the backward adds into exactly the held rows what the whole-vocabulary kernel adds
// there, and into dwpe what it adds there.
void test_vocab_parallel_embedding(gpu_backend& gpu, cpu_backend& cpu, int sequences, int seq_len, int width,
                                   int vocab, int first_row, int held) {
    const std::string shape = " (rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + held) +
                              ") of " + std::to_string(vocab) + ")";
    std::vector<std::int32_t> tokens(std::size_t(sequences) * seq_len);
    for (std::size_t n = 0; n < tokens.size(); ++n) tokens[n] = std::int32_t((n * 31 + 7) % std::size_t(vocab));
    const auto wte = random_values(std::size_t(vocab) * width, 51);
    const auto wpe = random_values(std::size_t(seq_len) * width, 52);
    const std::size_t first = std::size_t(first_row) * width, count = std::size_t(held) * width;
    const device_values d_wte(wte), d_wpe(wpe);
    int calls = 0;
    const auto double_on_device = [&](std::span<float> wide) {  // a group of two equal ranks
        ++calls;
        weft::exec::cuda_detail::launch::scale(wide.data(), wide.size(), 2.0f, gpu.stream());
    };
    const gpu_matrix y = gpu.vocab_parallel_embedding_forward(tokens, d_wte.view().subspan(first, count), first_row,
                                                              d_wpe.view(), width, seq_len, double_on_device);
    std::vector<float> want = values(cpu.vocab_parallel_embedding_forward(
        tokens, std::span<const float>(wte).subspan(first, count), first_row, wpe, width, seq_len,
        [](std::span<float> v) {
            for (float& x : v) x *= 2.0f;
        }));
    for (float& x : want) x = bf16_value(x);
    expect(calls == 1, "vocab_parallel_embedding_forward calls reduce once" + shape);
    expect(download(gpu, y) == want,
           "vocab_parallel_embedding_forward equals the host's sum, bit for bit" + shape);

    const cpu_matrix dy = random_matrix(static_cast<int>(tokens.size()), width, 53);
    const auto g_wte0 = random_values(wte.size(), 54), g_wpe0 = random_values(wpe.size(), 55);
    auto g_wte = g_wte0, g_wpe = g_wpe0;
    cpu.embedding_backward_weight(tokens, dy, g_wte, g_wpe, vocab, seq_len);
    device_values dg_wte(g_wte0), dg_wpe(g_wpe0);
    gpu.vocab_parallel_embedding_backward_weight(tokens, upload(gpu, dy), dg_wte.span().subspan(first, count),
                                                 first_row, dg_wpe.span(), seq_len);
    const auto got = dg_wte.host();
    auto want_wte = g_wte0;  // rows outside the slice untouched
    std::copy(g_wte.begin() + std::ptrdiff_t(first), g_wte.begin() + std::ptrdiff_t(first + count),
              want_wte.begin() + std::ptrdiff_t(first));
    expect_close("vocab_parallel_embedding_backward_weight: wte" + shape, got, want_wte, 1e-4f, 1e-5f);
    expect(std::equal(got.begin(), got.begin() + std::ptrdiff_t(first), g_wte0.begin()) &&
               std::equal(got.begin() + std::ptrdiff_t(first + count), got.end(),
                          g_wte0.begin() + std::ptrdiff_t(first + count)),
           "vocab_parallel_embedding_backward_weight leaves the other rows alone" + shape);
    expect_close("vocab_parallel_embedding_backward_weight: wpe" + shape, dg_wpe.host(), g_wpe, 1e-4f, 1e-5f);
}

void test_attention(gpu_backend& gpu, cpu_backend& cpu, int sequences, int seq_len, int heads, int head_dim) {
    const int width = heads * head_dim;
    const cpu_matrix qkv = random_matrix(sequences * seq_len, 3 * width, 21);
    const cpu_matrix dy = random_matrix(sequences * seq_len, width, 22);
    cpu_matrix probs;
    gpu_matrix saved;
    const gpu_matrix gqkv = upload(gpu, qkv);
    // The kernel rounds the probabilities to bf16 before P.V (as FlashAttention-2 does; the
    // host keeps them in fp32): each p_j is off by at most 2^-8 of itself (bf16's unit
    // roundoff), so an output is off by at most 2^-8 sum_j p_j |v_j| / sum_j p_j <= 2^-8 max|v|,
    // however much its terms cancel. Twice that is the absolute allowance (a masking or
    // indexing error moves early rows, of few keys, by a large part of |v|); the output's own
    // bf16 rounding is the relative one.
    float max_v = 0;
    for (Eigen::Index r = 0; r < qkv.rows(); ++r)
        for (int c = 2 * width; c < 3 * width; ++c) max_v = std::max(max_v, std::abs(qkv(r, c)));
    const std::string kernels = gpu.attention_kernel() == weft::exec::cuda_detail::attention_kernel::mma ? " (mma)" : " (wmma)";
    expect_close("causal_attention_forward" + kernels,
                 download(gpu, gpu.causal_attention_forward(gqkv, seq_len, heads, saved)),
                 values(cpu.causal_attention_forward(qkv, seq_len, heads, probs)), bf16_rtol,
                 std::ldexp(max_v, -7));
    // Backward reads the saved bf16 output (delta_i = dout_i . out_i), so its error is a few
    // bf16 roundings of terms that partly cancel.
    expect_close("causal_attention_backward" + kernels,
                 download(gpu, gpu.causal_attention_backward(gqkv, saved, upload(gpu, dy), seq_len, heads)),
                 values(cpu.causal_attention_backward(qkv, probs, dy, seq_len, heads)), 2e-2f, 1e-2f);
}

void test_host_memory_refused(gpu_backend& gpu) {
    const cpu_matrix x = random_matrix(4, 8, 23);
    const std::vector<float> host_weight(8 * 8, 0.5f), host_bias(8, 0.0f);
    bool named = false;
    try {
        static_cast<void>(gpu.linear_forward(upload(gpu, x), host_weight, host_bias, 8, 8));
    } catch (const weft::error& e) {
        named = std::string(e.what()).find("linear_forward: weight = \"host memory\"") != std::string::npos;
    }
    expect(named, "a weight in host memory is refused naming linear_forward: weight");
}

// exec::vocab_parallel_loss_kernels over one slice [first_column, first_column + cols) of a
// vocabulary: row maxima exact, sums within fp32 rounding, the gradient within bf16's.
void test_vocab_parallel_loss(gpu_backend& gpu, cpu_backend& cpu, int rows, int cols, int first_column, int vocab) {
    const std::string shape = " (" + std::to_string(rows) + "x" + std::to_string(cols) + ")";
    const cpu_matrix logits = random_matrix(rows, cols, 31, 2.0f);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) labels[std::size_t(r)] = (r * 97 + 13) % vocab;  // in and out of the slice
    const gpu_matrix g = upload(gpu, logits);
    const auto max = cpu.row_max(logits);
    expect(gpu.row_max(g) == max, "row_max" + shape + " equals the CPU's exactly");
    const auto sums = cpu.softmax_partial_sums(logits, max, labels, first_column);
    expect_close("softmax_partial_sums" + shape, gpu.softmax_partial_sums(g, max, labels, first_column), sums, 1e-5f,
                 1e-6f);
    expect_close("softmax_gradient" + shape,
                 download(gpu, gpu.softmax_gradient(g, max, sums, labels, first_column, 0.5f)),
                 values(cpu.softmax_gradient(logits, max, sums, labels, first_column, 0.5f)), bf16_rtol, 1e-6f);

    // The whole loss with its reductions on the GPU (exec::vocab_parallel_loss_reduction_kernels),
    // over a stand-in group of two ranks holding the same slice: the gather writes this rank's
    // maxima twice, the sum doubles. Against exec::cpu's same composition on the host.
    static_assert(weft::exec::vocab_parallel_loss_reduction_kernels<gpu_backend>);
    gpu_matrix gpu_d;
    const auto gpu_loss = gpu.vocab_parallel_cross_entropy(
        g, labels, first_column, 0.5f, 2,
        [&](std::span<const float> mine, std::span<float> all) {
            for (std::size_t q = 0; q < 2; ++q)
                weft::gpu::check(cudaMemcpyAsync(all.data() + q * mine.size(), mine.data(), mine.size_bytes(),
                                                  cudaMemcpyDeviceToDevice, gpu.stream()),
                                  "cudaMemcpyAsync (stand-in gather)");
        },
        [&](std::span<float> v) { weft::exec::cuda_detail::launch::scale(v.data(), v.size(), 2.0f, gpu.stream()); }, gpu_d);
    expect(gpu_loss.pending(), "vocab_parallel_cross_entropy leaves its loss to be read");
    cpu_matrix cpu_d;
    const float cpu_loss = cpu.vocab_parallel_cross_entropy(
        logits, labels, first_column, 0.5f, 2,
        [](std::span<const float> mine, std::span<float> all) {
            std::copy(mine.begin(), mine.end(), all.begin());
            std::copy(mine.begin(), mine.end(), all.begin() + std::ptrdiff_t(mine.size()));
        },
        [](std::span<float> v) {
            for (float& x : v) x *= 2.0f;
        },
        cpu_d);
    expect(std::fabs(gpu_loss.get() - cpu_loss) <= 1e-5f * std::fabs(cpu_loss) + 1e-6f,
           "vocab_parallel_cross_entropy loss" + shape + " " + std::to_string(gpu_loss.get()) + ", want " +
               std::to_string(cpu_loss));
    expect_close("vocab_parallel_cross_entropy dlogits" + shape, download(gpu, gpu_d), values(cpu_d), bf16_rtol,
                 1e-6f);
}

// exec::optimizer_kernels: AdamW's update is the host's bit for bit (IEEE intrinsics in the
// host's order), under both of torch.lerp's forms, with and without decay and a gradient
// scale; the gradient summary matches the host's sum within double rounding and finds a NaN
// or an infinity anywhere in the owned gradients, counted or not. SGD's update is the host's
// bit for bit too, with and without momentum, decay and a gradient scale.
void test_optimizer_kernels(gpu_backend& gpu, cpu_backend& cpu) {
    constexpr std::size_t n = 100000;
    std::mt19937 generator(29);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    const auto random = [&] {
        std::vector<float> v(n);
        for (float& x : v) x = normal(generator);
        return v;
    };
    for (const double beta1 : {0.9, 0.3}) {
        for (const float scale : {1.0f, 0.25f}) {
            for (const bool decays : {true, false}) {
                const std::string tag = " (beta1 " + std::to_string(beta1) + ", grad_scale " + std::to_string(scale) +
                                        (decays ? ", decays)" : ", no decay)");
                const auto f = weft::optim::adamw_factors<float>::of_step(
                    {.lr = 1e-3, .beta1 = beta1, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1}, 7, scale);
                auto p = random(), g = random(), m = random(), v = random();
                for (float& x : v) x = x * x;  // a second moment is not negative
                device_values dp(p), dg(g), dm(m), dv(v);
                gpu.adamw_update(dp.span(), dg.view(), dm.span(), dv.span(), f, decays);
                gpu.synchronize();
                cpu.adamw_update(p, g, m, v, f, decays);
                expect(dp.host() == p && dm.host() == m && dv.host() == v,
                       "adamw_update on the GPU equals the host's bit for bit" + tag);
            }
        }
    }

    for (const bool momentum : {true, false}) {
        for (const bool first : {true, false}) {
            for (const bool decays : {true, false}) {
                const std::string tag = std::string(" (") + (momentum ? "momentum" : "no momentum") +
                                        (first ? ", first step" : ", later step") + (decays ? ", decays)" : ")");
                const weft::optim::sgd_factors<float> f{.lr = 0.05f, .momentum = momentum ? 0.9f : 0.0f,
                                                        .weight_decay = 0.01f, .grad_scale = 0.75f,
                                                        .use_momentum = momentum, .first_step = first};
                auto p = random(), g = random(), buffer = momentum ? random() : std::vector<float>();
                device_values dp(p), dg(g), dbuffer(momentum ? buffer : std::vector<float>{0.0f});
                const std::span<float> device_buffer = momentum ? dbuffer.span() : std::span<float>();
                gpu.sgd_update(dp.span(), dg.view(), device_buffer, f, decays);
                gpu.synchronize();
                cpu.sgd_update(p, g, buffer, f, decays);
                expect(dp.host() == p && (!momentum || dbuffer.host() == buffer),
                       "sgd_update on the GPU equals the host's bit for bit" + tag);
            }
        }
    }

    for (const float factor : {1.0f / 3.0f, 0.125f}) {
        auto g = random();
        device_values dg(g);
        gpu.scale(dg.span(), factor);
        gpu.synchronize();
        cpu.scale(g, factor);
        expect(dg.host() == g,
               "scale on the GPU equals the host's bit for bit (factor " + std::to_string(factor) + ")");
    }

    const std::vector<weft::optim::flat_run> runs{{5, 300}, {1000, 50000}, {60000, 200000}};
    constexpr std::size_t offset = 100;  // owned: elements [100, 100100) of the flat buffer
    auto grads = random();
    const auto check_summary = [&](const std::string& what, bool finite) {
        device_values owned(grads);
        const auto got = gpu.summarize_gradients(owned.view(), offset, runs);
        const auto want = cpu.summarize_gradients(grads, offset, runs);
        expect(got.finite == finite && want.finite == finite, what + ": finite is " + (finite ? "true" : "false"));
        if (finite)
            expect(std::fabs(got.sum_of_squares - want.sum_of_squares) <= 1e-12 * want.sum_of_squares,
                   what + ": sum of squares " + std::to_string(got.sum_of_squares) + ", host " +
                       std::to_string(want.sum_of_squares));
    };
    check_summary("summarize_gradients", true);
    grads[400] = std::nanf("");  // element 500: between the first two runs, not counted
    check_summary("summarize_gradients, a NaN not counted", false);
    grads[400] = 1.0f;
    grads[70000] = -INFINITY;  // element 70100: counted
    check_summary("summarize_gradients, an infinity counted", false);
    grads[70000] = 1.0f;
    // Owned gradients in host memory take the host's code: the host's numbers exactly.
    const auto on_host = gpu.summarize_gradients(grads, offset, runs);
    expect(on_host.sum_of_squares == cpu.summarize_gradients(grads, offset, runs).sum_of_squares,
           "summarize_gradients over host memory is the host's");
}

// Tensor parallelism's sum in device memory (exec::matrix_reduction_kernels): with `reduce`
// standing in for a group of two equal ranks (values doubled), m must end as the host path
// leaves it, bit for bit: the fp32 sum, the bias added in fp32, one rounding to bf16.
void test_reduce_matrix(gpu_backend& gpu) {
    constexpr int rows = 37, cols = 80;
    const cpu_matrix x = random_matrix(rows, cols, 41);
    const auto bias = random_values(std::size_t(cols), 42, 0.5f);
    const device_values device_bias(bias);
    for (const bool with_bias : {false, true}) {
        const std::string tag = with_bias ? " (with a bias)" : " (no bias)";
        std::vector<float> want = values(x);
        for (std::size_t i = 0; i < want.size(); ++i)
            want[i] = bf16_value(2.0f * want[i] + (with_bias ? bias[i % std::size_t(cols)] : 0.0f));
        gpu_matrix d = upload(gpu, x);
        int calls = 0;
        gpu.reduce_matrix(d, with_bias ? device_bias.view() : std::span<const float>(),
                          [&](std::span<float> wide) {
                              ++calls;
                              expect(wide.size() == std::size_t(rows * cols),
                                     "reduce_matrix: reduce sees every element");
                              weft::exec::cuda_detail::launch::scale(wide.data(), wide.size(), 2.0f, gpu.stream());
                          });
        expect(calls == 1, "reduce_matrix calls reduce once" + tag);
        expect(download(gpu, d) == want, "reduce_matrix equals the host copy's sum and bias, bit for bit" + tag);
    }
    gpu_matrix d = upload(gpu, x);
    bool refused = false;
    try {
        gpu.reduce_matrix(d, std::span<const float>(bias), [](std::span<float>) {});
    } catch (const weft::error& e) {
        refused = std::string(e.what()).find("reduce_matrix: bias") != std::string::npos;
    }
    expect(refused, "reduce_matrix refuses a bias in host memory, by name");
}

// The state memory keeps a freed buffer for the next one of its size (core/block_pool.hpp):
// the same managed buffer comes back, zeroed, and readable on the host as it returns.
void test_state_memory_pool(gpu_backend& gpu) {
    const weft::state_memory& memory = gpu.state_memory();
    constexpr std::size_t bytes = (std::size_t{3} << 20) + 8;  // a size no other test frees
    void* first = memory.allocate(bytes);
    weft::gpu::check(cudaMemset(first, 0x7f, bytes), "cudaMemset (dirtying a state buffer)");
    weft::gpu::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    memory.deallocate(first, bytes);
    void* again = memory.allocate(bytes);
    expect(again == first, "a freed state buffer is reused for the next of its size");
    const auto* b = static_cast<const unsigned char*>(again);
    bool zero = true;
    for (std::size_t i = 0; i < bytes; i += 4093) zero = zero && b[i] == 0;
    expect(zero && b[bytes - 1] == 0, "a reused state buffer is zero-filled when it is handed out");
    memory.deallocate(again, bytes);
}

// Freeing a state buffer the backend's queued work still uses does not wait for the device
// (RESHARD frees ZeRO-3's parameters so): the pool fences it (weft/gpu/stream_registry.hpp)
// and hands it out again, zeroed, only after that work. A host function holds the stream until
// the host releases it, so the work is surely unfinished when the free returns. (A free that
// waited for the device would return only when the hold gives up after 10 s, and the check
// would fail rather than hang.)
void test_state_memory_free_without_wait(gpu_backend& gpu) {
    const weft::state_memory& memory = gpu.state_memory();
    expect(memory.frees_after_queued_work, "exec::cuda's state memory says it frees after queued work");
    constexpr std::size_t bytes = (std::size_t{5} << 20) + 24;  // a size no other test frees
    void* block = memory.allocate(bytes);
    std::atomic<bool> released{false};
    weft_test::hold_stream(gpu.stream(), released);
    weft::gpu::check(cudaMemsetAsync(block, 0x7f, bytes, gpu.stream()), "cudaMemsetAsync (queued use)");
    memory.deallocate(block, bytes);
    expect(cudaStreamQuery(gpu.stream()) == cudaErrorNotReady,
           "freeing a state buffer returns while the work queued before it still runs");
    released = true;
    void* again = memory.allocate(bytes);
    expect(again == block, "the fenced buffer comes back for the next allocation of its size");
    expect(cudaStreamQuery(gpu.stream()) == cudaSuccess, "handing it out waited for the work before its free");
    const auto* b = static_cast<const unsigned char*>(again);
    bool zero = true;
    for (std::size_t i = 0; i < bytes; i += 4093) zero = zero && b[i] == 0;
    expect(zero && b[bytes - 1] == 0, "after that work, zeroed: the queued write did not land after the zeroing");
    memory.deallocate(again, bytes);
}

// With a wait limit (the engine sets its communicator's timeout), a host wait for work that
// does not finish aborts the GPU's registered communicators (a fake one here counts them) and
// gives up with comm::timeout_error naming the rank, rather than holding the run: a host
// function holds the stream, as a receive whose peer never sends would hold it over
// comm::nccl. Without a limit the wait would last until the hold gives up after 10 s, and
// the checks would fail rather than hang.
void test_wait_limit(gpu_backend& gpu) {
    bool refused = false;
    try {
        gpu.set_wait_limit(std::chrono::seconds(0), 0);
    } catch (const weft::error& e) {
        refused = std::string(e.what()).find("wait limit") != std::string::npos;
    }
    expect(refused, "a wait limit of 0 s is refused, naming the wait limit");

    gpu.set_wait_limit(std::chrono::milliseconds(200), 3);
    expect(gpu.wait_limit().rank == 3 && gpu.wait_limit().limit == std::chrono::milliseconds(200),
           "set_wait_limit keeps the limit and the rank");
    std::atomic<bool> released{false};
    struct fake_communicator {
        int aborts = 0;
        static void abort(void* self) noexcept { ++static_cast<fake_communicator*>(self)->aborts; }
    };
    fake_communicator watched;
    weft::comm::abort_on_timeout::registry().add(&watched, gpu.device(), fake_communicator::abort);
    const auto gives_up = [&watched](auto&& wait, const std::string& what) {
        const int aborts_before = watched.aborts;
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        try {
            wait();
        } catch (const weft::comm::timeout_error& e) {
            message = e.what();
        }
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        expect(message.find("rank 3") != std::string::npos && message.find("GPU 0") != std::string::npos,
               what + " ends in a timeout_error naming rank 3 and the GPU (got: " + message + ")");
        expect(waited >= 0.2 && waited < 5,
               what + " gives up after its limit (waited " + std::to_string(waited) + " s)");
        expect(watched.aborts == aborts_before + 1, what + " aborts the GPU's communicators first");
    };
    const gpu_matrix m = upload(gpu, random_matrix(4, 8, 71));
    std::vector<float> host(m.size());
    weft_test::hold_stream(gpu.stream(), released);
    gives_up([&] { gpu.synchronize(); }, "synchronize() behind a held stream");
    gives_up([&] { gpu.copy_to_host(m, std::span<float>(host)); }, "copy_to_host behind a held stream");
    released = true;
    weft::comm::abort_on_timeout::registry().remove(&watched);
    gpu.synchronize();  // the stream is usable again once the work goes on
    expect(cudaStreamQuery(gpu.stream()) == cudaSuccess, "after the hold, the queued work finished");

    gpu.set_wait_limit(weft::comm::no_timeout, 0);
    expect(gpu.wait_limit().limit == weft::comm::no_timeout, "no_timeout removes the limit");
}

// No GPU: making the backend is an error that names the device and says why.
void host_checks() {
    if (weft::gpu::device_count() > 0) return;
    bool named = false;
    try {
        gpu_backend backend(0);
    } catch (const weft::error& e) {
        named = std::string(e.what()).find("device = 0 is invalid: needs a CUDA GPU") != std::string::npos;
        if (!named) std::fprintf(stderr, "message: %s\n", e.what());
    }
    expect(named, "exec::cuda without a GPU is a weft::error naming device");
}

}  // namespace

// The operation profile (train_gpt --kernel-profile): each launch timed under its name, a
// GEMM under its shape, nothing once it is off; refused together with action graphs.
void test_operation_profile(gpu_backend& gpu) {
    const cpu_matrix x = random_matrix(64, 32, 1);
    const auto w = random_values(std::size_t(32) * 48, 3, 0.2f), b = random_values(48, 4);
    device_values dw_w(w), dw_b(b);
    const gpu_matrix gx = upload(gpu, x);
    gpu.enable_operation_profile();
    const gpu_matrix y = gpu.linear_forward(gx, dw_w.view(), dw_b.view(), 32, 48);
    static_cast<void>(gpu.add(y, y));
    const auto times = gpu.take_operation_times();
    const auto timed_once = [&](const std::string& name) {
        const auto it = std::find_if(times.begin(), times.end(), [&](const auto& t) { return t.name == name; });
        return it != times.end() && it->calls == 1 && it->milliseconds > 0;
    };
    expect(timed_once("gemm 64x48x32 +bias"), "the profile times linear_forward's GEMM once, by its shape");
    expect(timed_once("add"), "the profile times the add kernel once");
    expect(gpu.take_operation_times().empty(), "a take starts the profile over");
    {
        weft::exec::cuda_detail::profile_scope refused_gemm("gemm refused at its call", gpu.stream());
        refused_gemm.cancel();
    }
    expect(gpu.take_operation_times().empty(), "a cancelled scope (a GEMM cuBLASLt refused) times nothing");
    bool refused = false;
    try {
        gpu.enable_action_graphs(true);
    } catch (const weft::error&) {
        refused = true;
    }
    expect(refused && !gpu.action_graphs_enabled(), "action graphs are refused while the profile is on");
    gpu.enable_operation_profile(false);
    static_cast<void>(gpu.add(y, y));
    expect(gpu.take_operation_times().empty(), "nothing is timed once the profile is off");
    gpu.enable_action_graphs(true);
    refused = false;
    try {
        gpu.enable_operation_profile(true);
    } catch (const weft::error&) {
        refused = true;
    }
    expect(refused, "the profile is refused while action graphs are on");
    gpu.enable_action_graphs(false);
}

// A change of attention kernel drops the action graphs captured with the old one, whose
// replays would run the old kernels; setting the kernel already set keeps them; and a change
// inside an action is refused. Counted by graph launches: an action's first call after a drop
// runs eagerly and launches nothing, a kept graph's replay is one launch.
void test_attention_kernel_drops_graphs(gpu_backend& gpu, cpu_backend& cpu) {
    const int seq_len = 64, heads = 2, head_dim = 32;
    const cpu_matrix qkv = random_matrix(seq_len, 3 * heads * head_dim, 24);
    const gpu_matrix gqkv = upload(gpu, qkv);
    const weft::exec::action_key key{
        .stage = 0, .part = weft::exec::action_part::forward, .microbatch = 0, .rows = seq_len};
    // What the action allocates is freed before its graph launches again, as a step does.
    const auto forward = [&] {
        gpu_matrix saved;
        const gpu_matrix out =
            gpu.run_action(key, [&] { return gpu.causal_attention_forward(gqkv, seq_len, heads, saved); });
        return download(gpu, out);
    };
    gpu.set_attention_kernel(weft::exec::cuda_detail::attention_kernel::wmma);
    gpu.enable_action_graphs(true);
    const std::vector<float> eager = forward();  // measured
    expect(forward() == eager && gpu.action_graph_launches() == 1, "the second call is captured and launched");
    expect(forward() == eager && gpu.action_graph_launches() == 2, "the third call replays the graph");
    gpu.set_attention_kernel(weft::exec::cuda_detail::attention_kernel::wmma);
    expect(forward() == eager && gpu.action_graph_launches() == 3, "setting the same kernel keeps the graph");

    gpu.set_attention_kernel(weft::exec::cuda_detail::attention_kernel::mma);
    const std::vector<float> mma = forward();
    expect(gpu.action_graph_launches() == 3, "a new kernel drops the graph: the next call runs eagerly");
    cpu_matrix probs;
    expect_close("causal_attention_forward (mma, after wmma's graph was dropped)", mma,
                 values(cpu.causal_attention_forward(qkv, seq_len, heads, probs)), bf16_rtol, 1e-2f);
    expect(forward() == mma && gpu.action_graph_launches() == 4, "the mma kernels are captured anew");

    bool refused = false;
    try {
        weft::exec::action_key other = key;
        other.microbatch = 1;  // a first call: the action runs eagerly, being measured
        static_cast<void>(gpu.run_action(other, [&] {
            gpu.set_attention_kernel(weft::exec::cuda_detail::attention_kernel::wmma);
            return gpu_matrix();
        }));
    } catch (const weft::error& e) {
        refused = std::string(e.what()).find("set_attention_kernel") != std::string::npos;
    }
    expect(refused && gpu.attention_kernel() == weft::exec::cuda_detail::attention_kernel::mma,
           "set_attention_kernel inside an action is refused, and changes nothing");
    gpu.enable_action_graphs(false);
    gpu.set_attention_kernel(weft::exec::cuda_detail::attention_kernel::wmma);
}

int main(int argc, char** argv) {
    return weft_test::run_device_test(argc, argv, {"kernels"}, host_checks, [](std::string_view) {
        gpu_backend gpu(0);
        cpu_backend cpu;
        test_elementwise(gpu, cpu);
        test_linear(gpu, cpu, 37, 64, 80);
        test_linear(gpu, cpu, 128, 256, 768);
        // An odd width, as GPT-2's vocabulary (50257) makes the LM head's: rows of the output
        // and of its gradient start off 16-byte alignment.
        test_linear(gpu, cpu, 37, 64, 83);
        test_layer_norm(gpu, cpu, 50, 96);
        test_layer_norm(gpu, cpu, 50, 100);  // a warp's last pass over the columns partial
        test_fused(gpu, cpu, 40, 64);
        test_cross_entropy(gpu, cpu, 24, 1000);
        test_embedding(gpu, cpu, 3, 20, 64, 200);
        test_vocab_parallel_embedding(gpu, cpu, 3, 20, 64, 200, 67, 67);  // the middle third
        test_vocab_parallel_embedding(gpu, cpu, 2, 33, 80, 50, 0, 50);    // every row
        // Every head size the flash kernels have, sequences of one, two and four 64-row tiles,
        // full and partial (padded and masked past the end).
        test_attention(gpu, cpu, 2, 33, 3, 64);
        test_attention(gpu, cpu, 1, 16, 2, 32);
        test_attention(gpu, cpu, 1, 64, 4, 32);
        test_attention(gpu, cpu, 2, 130, 2, 96);
        test_attention(gpu, cpu, 1, 200, 1, 128);
        test_attention(gpu, cpu, 2, 70, 3, 128);  // the largest head size past the first head and sequence
        test_host_memory_refused(gpu);
        test_optimizer_kernels(gpu, cpu);
        test_reduce_matrix(gpu);
        test_state_memory_pool(gpu);
        test_state_memory_free_without_wait(gpu);
        test_wait_limit(gpu);
        test_vocab_parallel_loss(gpu, cpu, 24, 300, 100, 1000);
        test_operation_profile(gpu);
        // The same shapes through the mma.sync kernels (train_gpt --attention-kernel mma), last:
        // they have not run on a GPU yet, and a fault would fail every check after it.
        gpu.set_attention_kernel(weft::exec::cuda_detail::attention_kernel::mma);
        test_attention(gpu, cpu, 2, 33, 3, 64);
        test_attention(gpu, cpu, 1, 16, 2, 32);
        test_attention(gpu, cpu, 1, 64, 4, 32);
        test_attention(gpu, cpu, 2, 130, 2, 96);
        test_attention(gpu, cpu, 1, 200, 1, 128);
        test_attention(gpu, cpu, 2, 70, 3, 128);
        test_attention_kernel_drops_graphs(gpu, cpu);
    });
}
