// The CUDA backend's kernels against weft's CPU backend (or a double-precision loop
// where the CPU backend has no such kernel), within fp32 or bf16 tolerance, and a
// training step captured into a CUDA graph whose replays equal the eager run bit for bit.
// `test_cuda_kernels kernels|graph` runs one part; exit 77 (skipped) without a GPU.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cpu_reference.hpp"
#include "device_check.hpp"
#include "weft/exec/cuda/column_sums_layout.hpp"
#include "weft/exec/cuda/gemm.hpp"
#include "weft/exec/cuda/kernels/adamw.cuh"
#include "weft/exec/cuda/kernels/attention.cuh"
#include "weft/exec/cuda/kernels/bias_grad.cuh"
#include "weft/exec/cuda/kernels/convert.cuh"
#include "weft/exec/cuda/kernels/cross_entropy.cuh"
#include "weft/exec/cuda/kernels/embedding.cuh"
#include "weft/exec/cuda/kernels/flash_attention.cuh"
#include "weft/exec/cuda/kernels/flash_attention_mma.cuh"
#include "weft/exec/cuda/kernels/gelu.cuh"
#include "weft/exec/cuda/kernels/layer_norm.cuh"
#include "weft/exec/cuda/kernels/residual_add.cuh"
#include "weft/exec/token_groups.hpp"
#include "weft/gpu/device_buffer.hpp"
#include "weft/gpu/graph.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream.hpp"

namespace cu = weft::exec::cuda_detail;
namespace gpu = weft::gpu;
using cu::bf16;
using weft_test::vec;

namespace {

using weft_test::bits_equal;
using weft_test::expect;
using weft_test::expect_close;
using weft_test::max_abs;
using weft_test::failures;

template <class Fn>
void expect_throws(const std::string& what, Fn&& fn, const std::string& naming = "") {
    std::string message;
    bool threw = false;
    try {
        fn();
    } catch (const weft::error& e) {
        threw = true;
        message = e.what();
    }
    expect(threw && message.find(naming) != std::string::npos,
           what + " throws weft::error" + (naming.empty() ? "" : " naming '" + naming + "' (got '" + message + "')"));
}

vec random_vec(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    vec v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

float round_bf16(float v) {
    return __bfloat162float(__float2bfloat16_rn(v));
}
vec round_bf16(vec v) {
    for (float& x : v) x = round_bf16(x);
    return v;
}

template <class T>
gpu::device_buffer<T> upload(const vec& v) {
    std::vector<T> host(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        if constexpr (std::is_same_v<T, bf16>)
            host[i] = __float2bfloat16_rn(v[i]);
        else
            host[i] = v[i];
    }
    return gpu::device_buffer<T>(std::span<const T>(host));
}

template <class T>
vec download(const gpu::device_buffer<T>& d) {
    const std::vector<T> host = d.to_host();
    vec v(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) {
        if constexpr (std::is_same_v<T, bf16>)
            v[i] = __bfloat162float(host[i]);
        else
            v[i] = host[i];
    }
    return v;
}

// Tolerances: fp32 storage differs from the CPU only by summation order; bf16 storage
// adds one rounding (2^-8 relative) per stored value, a few of them in a chain.
template <class T>
constexpr float rtol = std::is_same_v<T, float> ? 2e-5f : 2e-2f;

// ---- checks that need no GPU: arguments are validated before any launch -----------

void test_argument_validation() {
    expect_throws("layer_norm_forward rows = 0", [] {
        cu::layer_norm_forward<float, float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 1e-5f,
                                             nullptr);
    });
    expect_throws("layer_norm_forward eps = 0", [] {
        cu::layer_norm_forward<float, float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 8, 0.0f, nullptr);
    });
    expect_throws("attention_forward head_dim = 48",
                  [] { cu::attention_forward<float>(nullptr, nullptr, nullptr, 1, 4, 2, 48, nullptr); });
    expect_throws("attention_backward seq = 0", [] {
        cu::attention_backward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, 2, 32, nullptr);
    });
    expect_throws("flash_attention_mma_forward head_dim = 48",
                  [] { cu::flash_attention_mma_forward(nullptr, nullptr, nullptr, 1, 4, 2, 48, nullptr); });
    expect_throws("flash_attention_mma_backward batch = 0", [] {
        cu::flash_attention_mma_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 2, 32, nullptr);
    });
    expect_throws("cross_entropy classes = 0", [] {
        cu::cross_entropy_forward_backward<float>(nullptr, nullptr, nullptr, nullptr, 4, 0, 1.0f, nullptr);
    });
    expect_throws("bias_grad cols = -1", [] { cu::bias_grad<float>(nullptr, nullptr, nullptr, 4, -1, nullptr); });
    expect_throws(
        "bias_grad without scratch", [] { cu::bias_grad<float>(nullptr, nullptr, nullptr, 4, 8, nullptr); },
        "bias_grad: partials = \"a null pointer\" is invalid: must hold column_sum_scratch_floats");
    // 65536 blocks of 32 columns: one more than a grid's y dimension holds.
    expect_throws(
        "layer_norm_backward_weight cols = 2097152",
        [] {
            float partials = 0;  // refused before any launch reads it
            cu::layer_norm_backward_weight<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &partials, 4,
                                                  2097152, nullptr);
        },
        "layer_norm_backward_weight: cols = 2097152 is invalid: must be at most 2097120");
    expect_throws("convert of null pointers", [] { cu::convert<float, bf16>(nullptr, nullptr, 4, nullptr); });
    expect_throws("cross_entropy stride < classes", [] {
        cu::cross_entropy_forward_backward<float>(nullptr, nullptr, nullptr, nullptr, 4, 10, 8, 1.0f, nullptr);
    });
    expect_throws("embedding_forward seq_len = 0",
                  [] { cu::embedding_forward<float, float>(nullptr, nullptr, nullptr, nullptr, 1, 0, 8, 4, nullptr); });
    expect_throws("embedding_backward of null pointers",
                  [] { cu::embedding_backward<float>(nullptr, nullptr, nullptr, nullptr, 1, 4, 8, 4, nullptr); });
    expect_throws("vocab_slice_lookup held_rows = -1", [] {
        cu::vocab_slice_lookup<float>(nullptr, nullptr, 0, -1, nullptr, 1, 4, 8, nullptr);
    });
    expect_throws("embedding_backward_rows first_row = -2", [] {
        cu::embedding_backward_rows<float>(nullptr, nullptr, nullptr, -2, 4, nullptr, 1, 4, 8, nullptr);
    });
    expect_throws("convert_adding_periodic with a period that does not divide n", [] {
        float in[8] = {}, addend[3] = {}, out[8] = {};  // refused before any launch reads them
        cu::convert_adding_periodic<float>(in, addend, 3, out, 8, nullptr);
    });
    expect_throws("residual_add of null pointers",
                  [] { cu::residual_add<float>(nullptr, nullptr, nullptr, 4, nullptr); });
}

// ---- device tests -------------------------------------------------------------------

void test_device_buffer() {
    const vec host = random_vec(1000, 1);
    gpu::device_buffer<float> a(host);
    expect(bits_equal(a.to_host(), host), "device_buffer round trip");
    gpu::device_buffer<float> b(std::move(a));
    expect(a.empty() && a.data() == nullptr && b.size() == 1000, "device_buffer move leaves the source empty");
    gpu::device_buffer<float> c(1000);
    c.copy_from(b);
    expect(bits_equal(c.to_host(), host), "device_buffer device-to-device copy");
    c.fill_zero();
    expect(bits_equal(c.to_host(), vec(1000, 0.0f)), "device_buffer fill_zero");
    expect_throws("copy_from_host of a short vector", [&] { c.copy_from_host(vec(999)); });
    gpu::device_buffer<float> empty;
    expect(empty.to_host().empty(), "empty device_buffer");
}

void test_convert() {
    vec values = random_vec(4099, 2, 100.0f);
    values[0] = 1.0f + 1.0f / 256.0f;  // a tie: rounds to even (1.0)
    values[1] = -0.0f;
    gpu::device_buffer<float> in(values);
    gpu::device_buffer<bf16> half(values.size());
    gpu::device_buffer<float> back(values.size());
    cu::convert(in.data(), half.data(), values.size(), nullptr);
    cu::convert(half.data(), back.data(), values.size(), nullptr);
    const vec got = back.to_host();
    expect(bits_equal(got, round_bf16(values)), "float -> bf16 -> float equals host round-to-nearest-even");
    expect(got[0] == 1.0f, "bf16 rounding ties to even");
}

template <class Out>
void test_linear(int rows, int in, int out) {
    const std::string tag = std::string(std::is_same_v<Out, float> ? "fp32" : "bf16") + " out, " +
                            std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out);
    const vec x = round_bf16(random_vec(std::size_t(rows) * in, 10));
    const vec w = round_bf16(random_vec(std::size_t(in) * out, 11, 0.1f));
    vec b = random_vec(std::size_t(out), 12);
    if constexpr (std::is_same_v<Out, bf16>) b = round_bf16(b);
    const vec dy = round_bf16(random_vec(std::size_t(rows) * out, 13));
    auto dx_ = upload<bf16>(x), dw_ = upload<bf16>(w), ddy = upload<bf16>(dy);
    auto db_ = upload<Out>(b);
    gpu::device_buffer<Out> y(std::size_t(rows) * out), dx(std::size_t(rows) * in);
    cu::gemm gemm;
    gemm.linear_forward(dx_.data(), dw_.data(), db_.data(), y.data(), rows, in, out, nullptr);
    const vec want_y = weft_test::linear_forward(x, w, b, rows, in, out);
    // Inputs are exact in both; fp32 output differs by summation order only.
    const float r = std::is_same_v<Out, float> ? 1e-4f : 1e-2f;
    expect_close("linear_forward " + tag, download(y), want_y, r, r * max_abs(want_y));
    gemm.linear_backward_input(ddy.data(), dw_.data(), dx.data(), rows, in, out, nullptr);
    const vec want_dx = weft_test::linear_backward_input(dy, w, rows, in, out);
    expect_close("linear_backward_input " + tag, download(dx), want_dx, r, r * max_abs(want_dx));

    // dW accumulates into what is there.
    vec want_dw, want_db;
    weft_test::linear_backward_weight(x, dy, rows, in, out, want_dw, want_db);
    gpu::device_buffer<float> dw{vec(std::size_t(in) * out, 1.0f)}, db{vec(std::size_t(out), 1.0f)};
    gemm.linear_backward_weight(dx_.data(), ddy.data(), dw.data(), rows, in, out, nullptr);
    gpu::device_buffer<float> partials(cu::column_sum_scratch_floats(rows, out, 1));
    cu::bias_grad(ddy.data(), db.data(), partials.data(), rows, out, nullptr);
    for (float& v : want_dw) v += 1.0f;
    for (float& v : want_db) v += 1.0f;
    expect_close("linear_backward_weight " + tag, download(dw), want_dw, 1e-4f, 1e-4f * max_abs(want_dw));
    expect_close("bias_grad " + tag, download(db), want_db, 1e-5f, 1e-5f * max_abs(want_db));
}

template <class T>
void test_gelu() {
    const std::string tag = std::is_same_v<T, float> ? " fp32" : " bf16";
    vec x = random_vec(5000, 20, 3.0f), dy = random_vec(5000, 21);
    if constexpr (std::is_same_v<T, bf16>) x = round_bf16(x), dy = round_bf16(dy);
    auto dx_in = upload<T>(x), ddy = upload<T>(dy);
    gpu::device_buffer<T> y(x.size()), dx(x.size());
    cu::gelu_forward(dx_in.data(), y.data(), x.size(), nullptr);
    cu::gelu_backward(dx_in.data(), ddy.data(), dx.data(), x.size(), nullptr);
    // The reference's tanh is Eigen's fast rational approximation, a few float steps off near
    // tanh = -1 (x about -4 to -5, where gelu is about -3e-5): up to about 1e-6 of gelu there,
    // which the absolute allowances cover four times over.
    expect_close("gelu_forward" + tag, download(y), weft_test::gelu_forward(x), rtol<T>, 4e-6f);
    expect_close("gelu_backward" + tag, download(dx), weft_test::gelu_backward(x, dy), rtol<T>, 4e-5f);
}

// Rows of `spread` around `offset`. A spread of 1e-3 makes each row's variance (1e-6) ten
// times smaller than epsilon (1e-5), so rstd = 1 / sqrt(var + eps) is about 300 where a
// misplaced epsilon, 1 / (sqrt(var) + eps), would give about 990.
template <class T>
void test_layer_norm(int rows, int cols, float spread = 2.0f, float offset = 3.0f) {
    const std::string tag = (std::is_same_v<T, float> ? " fp32 " : " bf16 ") + std::to_string(cols) + " cols" +
                            (spread == 2.0f ? "" : ", spread " + std::to_string(spread));
    vec x = random_vec(std::size_t(rows) * cols, 30, spread), dy = random_vec(std::size_t(rows) * cols, 31);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += offset;  // by default a mean far from 0
    vec gamma = random_vec(std::size_t(cols), 32), beta = random_vec(std::size_t(cols), 33);
    if constexpr (std::is_same_v<T, bf16>)
        x = round_bf16(x), dy = round_bf16(dy), gamma = round_bf16(gamma), beta = round_bf16(beta);
    auto d_x = upload<T>(x), d_dy = upload<T>(dy), d_gamma = upload<T>(gamma), d_beta = upload<T>(beta);
    gpu::device_buffer<T> y(x.size()), dx(x.size());
    gpu::device_buffer<float> mean{std::size_t(rows)}, rstd{std::size_t(rows)};
    cu::layer_norm_forward(d_x.data(), d_gamma.data(), d_beta.data(), y.data(), mean.data(), rstd.data(), rows, cols,
                           1e-5f, nullptr);
    vec want_mean, want_rstd;
    const vec want_y = weft_test::layer_norm_forward(x, gamma, beta, rows, cols, want_mean, want_rstd);
    expect_close("layer_norm_forward y" + tag, download(y), want_y, rtol<T>, rtol<T>);
    expect_close("layer_norm_forward mean" + tag, download(mean), want_mean, 1e-5f, 1e-6f);
    expect_close("layer_norm_forward rstd" + tag, download(rstd), want_rstd, 1e-4f, 0.0f);

    cu::layer_norm_backward_input(d_x.data(), mean.data(), rstd.data(), d_gamma.data(), d_dy.data(), dx.data(), rows,
                                  cols, nullptr);
    const vec want_dx = weft_test::layer_norm_backward_input(x, want_mean, want_rstd, gamma, dy, rows, cols);
    expect_close("layer_norm_backward_input" + tag, download(dx), want_dx, rtol<T> * 10, rtol<T> * max_abs(want_dx));

    vec want_dgamma, want_dbeta;
    weft_test::layer_norm_backward_weight(x, want_mean, want_rstd, dy, rows, cols, want_dgamma, want_dbeta);
    gpu::device_buffer<float> dgamma{vec(std::size_t(cols), 0.5f)}, dbeta{vec(std::size_t(cols), 0.5f)};
    gpu::device_buffer<float> partials(cu::column_sum_scratch_floats(rows, cols, 2));
    cu::layer_norm_backward_weight(d_x.data(), mean.data(), rstd.data(), d_dy.data(), dgamma.data(), dbeta.data(),
                                   partials.data(), rows, cols, nullptr);
    for (float& v : want_dgamma) v += 0.5f;
    for (float& v : want_dbeta) v += 0.5f;
    expect_close("layer_norm_backward_weight dgamma" + tag, download(dgamma), want_dgamma, 1e-4f,
                 1e-4f * max_abs(want_dgamma));
    expect_close("layer_norm_backward_weight dbeta" + tag, download(dbeta), want_dbeta, 1e-5f,
                 1e-5f * max_abs(want_dbeta));
}

// Logits of spread 3 around `offset`. At an offset of 100, exp(logit) overflows a float
// (above 88.7), so only a kernel that subtracts each row's maximum first gives finite losses.
template <class T>
void test_cross_entropy(int rows, int classes, float offset = 0.0f) {
    const std::string tag = (std::is_same_v<T, float> ? " fp32 " : " bf16 ") + std::to_string(classes) + " classes" +
                            (offset == 0.0f ? "" : ", logits around " + std::to_string(offset));
    vec logits = random_vec(std::size_t(rows) * classes, 40, 3.0f);
    for (float& v : logits) v += offset;
    if constexpr (std::is_same_v<T, bf16>) logits = round_bf16(logits);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) labels[std::size_t(r)] = (r * 7919) % classes;
    auto d_logits = upload<T>(logits);
    gpu::device_buffer<std::int32_t> d_labels{std::span<const std::int32_t>(labels)};
    gpu::device_buffer<float> losses{std::size_t(rows)}, loss{1};
    gpu::device_buffer<T> dlogits(logits.size());
    const float scale = 0.5f;
    cu::cross_entropy_forward_backward(d_logits.data(), d_labels.data(), losses.data(), dlogits.data(), rows, classes,
                                       scale, nullptr);
    cu::mean(losses.data(), rows, loss.data(), nullptr);
    vec want_dlogits;
    const float want_loss = weft_test::cross_entropy(logits, labels, rows, classes, scale, want_dlogits);
    expect_close("cross_entropy loss" + tag, download(loss), vec{want_loss}, 1e-5f, 0.0f);
    expect_close("cross_entropy dlogits" + tag, download(dlogits), want_dlogits, rtol<T>,
                 1e-3f * max_abs(want_dlogits));

    // Forward only, and an invalid label shows as NaN rather than a plausible number.
    labels[1] = classes;
    d_labels.copy_from_host(labels);
    cu::cross_entropy_forward_backward<T>(d_logits.data(), d_labels.data(), losses.data(), nullptr, rows, classes,
                                          scale, nullptr);
    const vec got = download(losses);
    expect(std::isnan(got[1]) && !std::isnan(got[0]), "cross_entropy: an out-of-range label gives a NaN loss" + tag);
}

// mean() over more values than its block has threads (1,024), so each thread sums several:
// against a double sum, and bit-identical when run again (a fixed summation order).
void test_mean(int n) {
    const std::string tag = " of " + std::to_string(n) + " values";
    std::mt19937 gen(50);
    std::uniform_real_distribution<float> dist(1.0f, 2.0f);  // a mean far from 0: a relative check means something
    vec values(static_cast<std::size_t>(n));
    for (float& v : values) v = dist(gen);
    double sum = 0;
    for (float v : values) sum += v;
    const gpu::device_buffer<float> d_values{values};
    gpu::device_buffer<float> first{1}, again{1};
    cu::mean(d_values.data(), n, first.data(), nullptr);
    cu::mean(d_values.data(), n, again.data(), nullptr);
    expect_close("mean" + tag, download(first), vec{float(sum / n)}, 1e-5f, 0.0f);
    expect(bits_equal(first.to_host(), again.to_host()), "mean" + tag + " is the same bits when run again");
}

// The vocabulary padded to `stride` columns: the padding (filled with huge values here)
// must not change the losses or the real columns' gradient, and gets a zero gradient.
// Values the one-pass softmax must treat as the two-pass one did: a -inf logit (a masked
// class) adds nothing, also as a thread's first values, and a NaN logit makes the loss NaN,
// also when it is the only value its thread reads (column 1000 of 1001: the last vector).
void test_cross_entropy_special_values() {
    constexpr int classes = 1001;
    const float inf = std::numeric_limits<float>::infinity();
    vec masked = round_bf16(random_vec(classes, 43, 3.0f));
    for (int c = 0; c < 16; ++c) masked[std::size_t(c)] = -inf;  // threads 0 and 1's first vectors
    vec with_nan = round_bf16(random_vec(classes, 44, 3.0f));
    with_nan[classes - 1] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<std::int32_t> label{500};
    gpu::device_buffer<std::int32_t> d_label{std::span<const std::int32_t>(label)};
    for (const bool nan_case : {false, true}) {
        const vec& logits = nan_case ? with_nan : masked;
        auto d_logits = upload<bf16>(logits);
        gpu::device_buffer<float> loss{1};
        gpu::device_buffer<bf16> dlogits(logits.size());
        cu::cross_entropy_forward_backward(d_logits.data(), d_label.data(), loss.data(), dlogits.data(), 1, classes,
                                           1.0f, nullptr);
        const float got = download(loss)[0];
        if (nan_case) {
            expect(std::isnan(got), "cross_entropy: a NaN logit alone in its thread's vector gives a NaN loss, not " +
                                        std::to_string(got));
        } else {
            vec want_dlogits;
            const float want = weft_test::cross_entropy(logits, label, 1, classes, 1.0f, want_dlogits);
            expect_close("cross_entropy with -inf logits", vec{got}, vec{want}, 1e-5f, 0.0f);
        }
    }
}

void test_cross_entropy_padded(int rows, int classes, int stride) {
    const std::string tag = " " + std::to_string(classes) + " classes in rows of " + std::to_string(stride);
    const vec logits = round_bf16(random_vec(std::size_t(rows) * classes, 41, 3.0f));
    vec padded(std::size_t(rows) * stride, 1e4f);
    for (int r = 0; r < rows; ++r)
        std::copy_n(logits.begin() + std::ptrdiff_t(r) * classes, classes, padded.begin() + std::ptrdiff_t(r) * stride);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) labels[std::size_t(r)] = (r * 7919) % classes;
    gpu::device_buffer<std::int32_t> d_labels{std::span<const std::int32_t>(labels)};
    auto d_logits = upload<bf16>(logits), d_padded = upload<bf16>(padded);
    gpu::device_buffer<float> losses{std::size_t(rows)}, padded_losses{std::size_t(rows)};
    gpu::device_buffer<bf16> dlogits(logits.size()), padded_dlogits(padded.size());
    cu::cross_entropy_forward_backward(d_logits.data(), d_labels.data(), losses.data(), dlogits.data(), rows, classes,
                                       1.0f, nullptr);
    cu::cross_entropy_forward_backward(d_padded.data(), d_labels.data(), padded_losses.data(), padded_dlogits.data(),
                                       rows, classes, stride, 1.0f, nullptr);
    expect(bits_equal(losses.to_host(), padded_losses.to_host()), "cross_entropy losses unchanged by padding" + tag);
    const vec want = download(dlogits), got = download(padded_dlogits);
    bool same = true, zero = true;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < stride; ++c) {
            const float g = got[std::size_t(r) * stride + c];
            if (c < classes)
                same = same && std::memcmp(&g, &want[std::size_t(r) * classes + c], sizeof g) == 0;
            else
                zero = zero && g == 0.0f;
        }
    expect(same, "cross_entropy dlogits of the real columns unchanged by padding" + tag);
    expect(zero, "cross_entropy dlogits of the padding columns are zero" + tag);
}

// Enough columns for several column passes of the backward's blocks (256 threads, the last
// pass partial), a small vocabulary so tokens repeat (groups of many rows), and ids that
// never occur (no group). fp32 sums in the CPU's order (ascending rows per token, sequences
// in order per position), so fp32 storage agrees to rounding.
template <class T>
void test_embedding(int sequences, int seq_len, int width, int vocab) {
    const std::string tag = (std::is_same_v<T, float> ? " fp32 " : " bf16 ") + std::to_string(sequences) + "x" +
                            std::to_string(seq_len) + "x" + std::to_string(width) + ", vocab " + std::to_string(vocab);
    const int rows = sequences * seq_len;
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) tokens[std::size_t(r)] = (r * 37 + r / 7) % (vocab - 3);  // ids >= vocab - 3 unused
    const vec wte = random_vec(std::size_t(vocab) * width, 60), wpe = random_vec(std::size_t(seq_len) * width, 61);
    vec dy = random_vec(std::size_t(rows) * width, 62);
    if constexpr (std::is_same_v<T, bf16>) dy = round_bf16(dy);
    gpu::device_buffer<std::int32_t> d_tokens{std::span<const std::int32_t>(tokens)};
    gpu::device_buffer<float> d_wte(wte), d_wpe(wpe);
    gpu::device_buffer<T> out(std::size_t(rows) * width);
    cu::embedding_forward(d_tokens.data(), d_wte.data(), d_wpe.data(), out.data(), sequences, seq_len, width, vocab,
                          nullptr);
    const vec want_out = weft_test::embedding_forward(tokens, wte, wpe, vocab, width, seq_len);
    expect_close("embedding_forward" + tag, download(out), want_out, std::is_same_v<T, float> ? 0.0f : 4e-3f, 0.0f);

    // Accumulates: both start from 0.5.
    vec want_dwte(wte.size(), 0.5f), want_dwpe(wpe.size(), 0.5f);
    weft_test::embedding_backward(tokens, dy, vocab, width, seq_len, want_dwte, want_dwpe);
    auto d_dy = upload<T>(dy);
    gpu::device_buffer<float> dwte{vec(wte.size(), 0.5f)}, dwpe{vec(wpe.size(), 0.5f)};
    const std::vector<std::int32_t> groups = weft::exec::group_rows_by_token(tokens, 0, vocab);
    const gpu::device_buffer<std::int32_t> d_groups{std::span<const std::int32_t>(groups)};
    cu::embedding_backward(d_groups.data(), d_dy.data(), dwte.data(), dwpe.data(), sequences, seq_len, width, vocab,
                           nullptr);
    // The CPU's order (ascending rows per token, summed apart and then added): the same bits.
    expect_close("embedding_backward dwte" + tag, download(dwte), want_dwte, 0.0f, 0.0f);
    expect_close("embedding_backward dwpe" + tag, download(dwpe), want_dwpe, 1e-6f, 1e-6f);

    // A rank's slice of the vocabulary (tensor parallelism): only its rows, the same sums.
    const int first_row = vocab / 3, held_rows = vocab / 3;
    const std::vector<std::int32_t> slice_groups = weft::exec::group_rows_by_token(tokens, first_row, held_rows);
    const gpu::device_buffer<std::int32_t> d_slice_groups{std::span<const std::int32_t>(slice_groups)};
    gpu::device_buffer<float> dwte_rows{vec(std::size_t(held_rows) * width, 0.5f)}, dwpe_again{vec(wpe.size(), 0.5f)};
    cu::embedding_backward_rows(d_slice_groups.data(), d_dy.data(), dwte_rows.data(), first_row, held_rows,
                                dwpe_again.data(), sequences, seq_len, width, nullptr);
    const vec want_rows(want_dwte.begin() + std::ptrdiff_t(first_row) * width,
                        want_dwte.begin() + std::ptrdiff_t(first_row + held_rows) * width);
    expect_close("embedding_backward_rows dwte rows [" + std::to_string(first_row) + ", " +
                     std::to_string(first_row + held_rows) + ")" + tag,
                 download(dwte_rows), want_rows, 0.0f, 0.0f);

    // A token outside the vocabulary cannot throw from the device: its row is NaN.
    tokens[1] = vocab;
    d_tokens.copy_from_host(tokens);
    cu::embedding_forward(d_tokens.data(), d_wte.data(), d_wpe.data(), out.data(), sequences, seq_len, width, vocab,
                          nullptr);
    const vec got = download(out);
    expect(std::isnan(got[std::size_t(width)]) && !std::isnan(got[0]),
           "embedding_forward: an out-of-range token gives a NaN row" + tag);
}

void test_residual_add() {
    const vec a = random_vec(5000, 63), b = random_vec(5000, 64);
    gpu::device_buffer<float> d_a(a), d_b(b), out(a.size());
    cu::residual_add(d_a.data(), d_b.data(), out.data(), a.size(), nullptr);
    vec want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];
    expect(bits_equal(out.to_host(), want), "residual_add fp32 equals the host sum");
    cu::residual_add(d_a.data(), d_b.data(), d_a.data(), a.size(), nullptr);  // in place
    expect(bits_equal(d_a.to_host(), want), "residual_add in place");
}

template <class T>
void test_attention(int batch, int seq, int heads, int head_dim) {
    const std::string tag = (std::is_same_v<T, float> ? " fp32 " : " bf16 ") + std::to_string(batch) + "x" +
                            std::to_string(seq) + "x" + std::to_string(heads) + "x" + std::to_string(head_dim);
    const int C = heads * head_dim;
    vec qkv = random_vec(std::size_t(batch) * seq * 3 * C, 50), dout = random_vec(std::size_t(batch) * seq * C, 51);
    if constexpr (std::is_same_v<T, bf16>) qkv = round_bf16(qkv), dout = round_bf16(dout);
    auto d_qkv = upload<T>(qkv), d_dout = upload<T>(dout);
    gpu::device_buffer<T> out(std::size_t(batch) * seq * C), dqkv(qkv.size());
    gpu::device_buffer<float> lse(std::size_t(batch) * heads * seq), delta(lse.size());
    cu::attention_forward(d_qkv.data(), out.data(), lse.data(), batch, seq, heads, head_dim, nullptr);
    const vec want_out = weft_test::attention_forward(qkv, batch, seq, heads, head_dim);
    expect_close("attention_forward" + tag, download(out), want_out, rtol<T>, rtol<T> * max_abs(want_out));
    cu::attention_backward(d_qkv.data(), out.data(), d_dout.data(), lse.data(), delta.data(), dqkv.data(), batch, seq,
                           heads, head_dim, nullptr);
    const vec want_dqkv = weft_test::attention_backward(qkv, dout, batch, seq, heads, head_dim);
    // delta = dout . out uses the stored (rounded) out, hence the wider bf16 bound.
    const float r = std::is_same_v<T, float> ? 1e-4f : 5e-2f;
    expect_close("attention_backward" + tag, download(dqkv), want_dqkv, r, r * max_abs(want_dqkv));
}

// The mma.sync kernels (not yet the backend's default) against the double reference, with
// tests/exec/cuda/backend_test.cpp's bounds for the WMMA kernels: forward within 2^-7 max|v|
// (the probabilities' bf16 rounding) plus the output's own rounding, backward within a few
// bf16 roundings. lse and the outputs also against the WMMA kernels, which round at the same
// points: a fragment-layout or masking error shows as a large difference there too.
void test_flash_attention_mma(int batch, int seq, int heads, int head_dim) {
    const std::string tag = " " + std::to_string(batch) + "x" + std::to_string(seq) + "x" + std::to_string(heads) +
                            "x" + std::to_string(head_dim);
    const int C = heads * head_dim;
    const std::size_t rows = std::size_t(batch) * seq;
    const vec qkv = round_bf16(random_vec(rows * 3 * C, 52)), dout = round_bf16(random_vec(rows * C, 53));
    auto d_qkv = upload<bf16>(qkv), d_dout = upload<bf16>(dout);
    gpu::device_buffer<bf16> out(rows * C), wmma_out(rows * C), dqkv(qkv.size()), wmma_dqkv(qkv.size());
    gpu::device_buffer<float> lse(std::size_t(batch) * heads * seq), wmma_lse(lse.size()), delta(lse.size());
    // NaN bytes: a row or column the kernels leave unwritten fails every comparison.
    for (auto* buffer : {&out, &dqkv})
        gpu::check(cudaMemset(buffer->data(), 0xff, buffer->size() * sizeof(bf16)), "cudaMemset");
    gpu::check(cudaMemset(lse.data(), 0xff, lse.size() * sizeof(float)), "cudaMemset");

    cu::flash_attention_mma_forward(d_qkv.data(), out.data(), lse.data(), batch, seq, heads, head_dim, nullptr);
    cu::flash_attention_forward(d_qkv.data(), wmma_out.data(), wmma_lse.data(), batch, seq, heads, head_dim, nullptr);
    float max_v = 0;
    for (std::size_t r = 0; r < rows; ++r)
        for (int c = 2 * C; c < 3 * C; ++c) max_v = std::max(max_v, std::fabs(qkv[r * 3 * C + std::size_t(c)]));
    const vec want_out = weft_test::attention_forward(qkv, batch, seq, heads, head_dim);
    expect_close("flash_attention_mma_forward" + tag, download(out), want_out, 8e-3f, std::ldexp(max_v, -7));
    expect_close("flash_attention_mma_forward vs WMMA" + tag, download(out), download(wmma_out), 8e-3f,
                 std::ldexp(max_v, -7));
    expect_close("flash_attention_mma_forward lse vs WMMA" + tag, download(lse), download(wmma_lse), 1e-5f, 1e-5f);

    cu::flash_attention_mma_backward(d_qkv.data(), out.data(), d_dout.data(), lse.data(), delta.data(), dqkv.data(),
                                     batch, seq, heads, head_dim, nullptr);
    cu::flash_attention_backward(d_qkv.data(), wmma_out.data(), d_dout.data(), wmma_lse.data(), delta.data(),
                                 wmma_dqkv.data(), batch, seq, heads, head_dim, nullptr);
    const vec want_dqkv = weft_test::attention_backward(qkv, dout, batch, seq, heads, head_dim);
    expect_close("flash_attention_mma_backward" + tag, download(dqkv), want_dqkv, 2e-2f, 1e-2f * max_abs(want_dqkv));
    expect_close("flash_attention_mma_backward vs WMMA" + tag, download(dqkv), download(wmma_dqkv), 2e-2f,
                 1e-2f * max_abs(want_dqkv));

    // A fixed order of every sum (no atomics): a second run repeats the first bit for bit.
    gpu::device_buffer<bf16> again_out(out.size()), again_dqkv(dqkv.size());
    gpu::device_buffer<float> again_lse(lse.size());
    cu::flash_attention_mma_forward(d_qkv.data(), again_out.data(), again_lse.data(), batch, seq, heads, head_dim,
                                    nullptr);
    cu::flash_attention_mma_backward(d_qkv.data(), again_out.data(), d_dout.data(), again_lse.data(), delta.data(),
                                     again_dqkv.data(), batch, seq, heads, head_dim, nullptr);
    expect(bits_equal(again_out.to_host(), out.to_host()) && bits_equal(again_lse.to_host(), lse.to_host()) &&
               bits_equal(again_dqkv.to_host(), dqkv.to_host()),
           "flash_attention_mma repeats bit for bit" + tag);
}

void test_adamw() {
    const int rows = 16, cols = 40;
    const std::size_t n = std::size_t(rows) * cols + cols;
    const vec params = random_vec(n, 60);
    std::vector<vec> grads;
    for (std::uint32_t s = 0; s < 3; ++s) grads.push_back(random_vec(n, 61 + s, 0.1f));
    const double lr = 1e-2, weight_decay = 0.1;
    const vec want = weft_test::adamw(params, grads, rows, cols, lr, weight_decay);

    gpu::device_buffer<float> p(params), g(n), m(n), v(n);
    gpu::device_buffer<bf16> p16(n);
    m.fill_zero();
    v.fill_zero();
    gpu::device_buffer<cu::adamw_state> state(1);
    cu::adamw_state_init(state.data(), lr, 0.9, 0.999, 1e-8, weight_decay);
    const std::vector<cu::adamw_range> ranges = {{0, std::size_t(rows) * cols, true},
                                                 {std::size_t(rows) * cols, std::size_t(cols), false}};
    for (const vec& grad : grads) {
        g.copy_from_host(grad);
        cu::adamw_begin_step(state.data(), nullptr);
        cu::adamw_update(p.data(), g.data(), m.data(), v.data(), p16.data(), ranges, state.data(), nullptr);
    }
    const vec got = p.to_host();
    expect_close("adamw 3 steps vs weft::optim::adamw", got, want, 1e-6f, 1e-7f);
    expect(bits_equal(download(p16), round_bf16(got)), "adamw bf16 copy is the rounded master weights");
    expect(state.to_host()[0].step == 3, "adamw step counter advanced on the device");
}

// ---- a training step as a CUDA graph ------------------------------------------------

// ln -> c_attn gemm -> attention -> gemm -> gelu -> gemm (logits) -> cross-entropy, the
// whole backward, and AdamW on one flat fp32 master buffer with a bf16 copy.
struct tiny_model {
    static constexpr int batch = 4, seq = 16, heads = 2, head_dim = 32, C = heads * head_dim, F = 4 * C, V = 96;
    static constexpr int N = batch * seq;
    // Flat layout of parameters (and their gradients, moments, bf16 copy).
    static constexpr std::size_t w1 = 0, b1 = w1 + std::size_t(C) * 3 * C, w2 = b1 + 3 * C,
                                 b2 = w2 + std::size_t(C) * F, w3 = b2 + F, b3 = w3 + std::size_t(F) * V,
                                 gamma = b3 + V, beta = gamma + C, total = beta + C;

    cu::gemm gemm;
    gpu::device_buffer<float> master{total}, grads{total}, m{total}, v{total};
    gpu::device_buffer<bf16> params{total};
    gpu::device_buffer<cu::adamw_state> state{1};
    gpu::device_buffer<bf16> x{std::size_t(N) * C}, ln{std::size_t(N) * C}, qkv{std::size_t(N) * 3 * C},
        att{std::size_t(N) * C}, h{std::size_t(N) * F}, g{std::size_t(N) * F}, logits{std::size_t(N) * V},
        dlogits{std::size_t(N) * V}, dg{std::size_t(N) * F}, dh{std::size_t(N) * F}, datt{std::size_t(N) * C},
        dqkv{std::size_t(N) * 3 * C}, dln{std::size_t(N) * C}, dx{std::size_t(N) * C};
    gpu::device_buffer<float> mean{std::size_t(N)}, rstd{std::size_t(N)}, lse{std::size_t(N) * heads},
        delta{std::size_t(N) * heads}, losses{std::size_t(N)}, loss{1};
    // The column sums' scratch (bias and LayerNorm weight gradients), one after another on the stream.
    gpu::device_buffer<float> partials{cu::column_sum_scratch_floats(N, std::max({V, F, 3 * C}), 2)};
    gpu::device_buffer<std::int32_t> labels{std::size_t(N)};
    std::vector<cu::adamw_range> ranges;

    tiny_model() {
        for (auto [offset, size, decays] : {std::tuple{w1, b1 - w1, true},
                                            {b1, w2 - b1, false},
                                            {w2, b2 - w2, true},
                                            {b2, w3 - b2, false},
                                            {w3, b3 - w3, true},
                                            {b3, gamma - b3, false},
                                            {gamma, total - gamma, false}})
            ranges.push_back({offset, size, decays});
        std::vector<std::int32_t> host_labels(static_cast<std::size_t>(N));
        for (int i = 0; i < N; ++i) host_labels[std::size_t(i)] = (i * 31 + 7) % V;
        labels.copy_from_host(host_labels);
        const vec host_x = random_vec(x.size(), 70);
        gpu::device_buffer<float> x32(host_x);
        cu::convert(x32.data(), x.data(), x.size(), nullptr);
    }

    // Step 0 state: fresh weights, zero moments, a fresh optimizer state.
    void reset() {
        vec w = random_vec(total, 71, 0.02f);
        std::fill(w.begin() + std::ptrdiff_t(gamma), w.begin() + std::ptrdiff_t(beta), 1.0f);
        std::fill(w.begin() + std::ptrdiff_t(beta), w.end(), 0.0f);
        master.copy_from_host(w);
        cu::convert(master.data(), params.data(), total, nullptr);
        m.fill_zero();
        v.fill_zero();
        cu::adamw_state_init(state.data(), 1e-2, 0.9, 0.95, 1e-8, 0.1);
        check_sync();
    }

    static void check_sync() { gpu::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

    void enqueue_step(cudaStream_t s) {
        const bf16* P = params.data();
        float* G = grads.data();
        grads.fill_zero(s);
        cu::layer_norm_forward(x.data(), P + gamma, P + beta, ln.data(), mean.data(), rstd.data(), N, C, 1e-5f, s);
        gemm.linear_forward(ln.data(), P + w1, P + b1, qkv.data(), N, C, 3 * C, s);
        cu::attention_forward(qkv.data(), att.data(), lse.data(), batch, seq, heads, head_dim, s);
        gemm.linear_forward(att.data(), P + w2, P + b2, h.data(), N, C, F, s);
        cu::gelu_forward(h.data(), g.data(), h.size(), s);
        gemm.linear_forward(g.data(), P + w3, P + b3, logits.data(), N, F, V, s);
        cu::cross_entropy_forward_backward(logits.data(), labels.data(), losses.data(), dlogits.data(), N, V, 1.0f, s);
        cu::mean(losses.data(), N, loss.data(), s);

        gemm.linear_backward_weight(g.data(), dlogits.data(), G + w3, N, F, V, s);
        cu::bias_grad(dlogits.data(), G + b3, partials.data(), N, V, s);
        gemm.linear_backward_input(dlogits.data(), P + w3, dg.data(), N, F, V, s);
        cu::gelu_backward(h.data(), dg.data(), dh.data(), h.size(), s);
        gemm.linear_backward_weight(att.data(), dh.data(), G + w2, N, C, F, s);
        cu::bias_grad(dh.data(), G + b2, partials.data(), N, F, s);
        gemm.linear_backward_input(dh.data(), P + w2, datt.data(), N, C, F, s);
        cu::attention_backward(qkv.data(), att.data(), datt.data(), lse.data(), delta.data(), dqkv.data(), batch, seq,
                               heads, head_dim, s);
        gemm.linear_backward_weight(ln.data(), dqkv.data(), G + w1, N, C, 3 * C, s);
        cu::bias_grad(dqkv.data(), G + b1, partials.data(), N, 3 * C, s);
        gemm.linear_backward_input(dqkv.data(), P + w1, dln.data(), N, C, 3 * C, s);
        cu::layer_norm_backward_input(x.data(), mean.data(), rstd.data(), P + gamma, dln.data(), dx.data(), N, C, s);
        cu::layer_norm_backward_weight(x.data(), mean.data(), rstd.data(), dln.data(), G + gamma, G + beta,
                                       partials.data(), N, C, s);

        cu::adamw_begin_step(state.data(), s);
        cu::adamw_update(master.data(), G, m.data(), v.data(), params.data(), ranges, state.data(), s);
    }

    struct snapshot {
        std::vector<float> losses, master, m, v;
        std::vector<bf16> params, dx;
    };
    snapshot take(const std::vector<float>& step_losses) const {
        return {step_losses, master.to_host(), m.to_host(), v.to_host(), params.to_host(), dx.to_host()};
    }
};

void test_graph_replay() {
    constexpr int steps = 3;
    gpu::stream stream;
    tiny_model model;

    model.reset();
    std::vector<float> eager_losses;
    for (int i = 0; i < steps; ++i) {
        model.enqueue_step(stream);
        stream.synchronize();
        eager_losses.push_back(model.loss.to_host()[0]);
    }
    const auto eager = model.take(eager_losses);

    model.reset();
    const gpu::graph step = gpu::graph::capture(stream, [&](cudaStream_t s) { model.enqueue_step(s); });
    expect(step.node_count() >= 25,
           "the captured step holds every kernel and GEMM (" + std::to_string(step.node_count()) + " nodes)");
    std::vector<float> replay_losses;
    for (int i = 0; i < steps; ++i) {
        step.launch(stream);
        stream.synchronize();
        replay_losses.push_back(model.loss.to_host()[0]);
    }
    const auto replay = model.take(replay_losses);

    std::printf("losses eager %.7f %.7f %.7f, replay %.7f %.7f %.7f\n", double(eager_losses[0]),
                double(eager_losses[1]), double(eager_losses[2]), double(replay_losses[0]), double(replay_losses[1]),
                double(replay_losses[2]));
    expect(std::isfinite(eager_losses[0]) && std::fabs(eager_losses[0] - std::log(float(tiny_model::V))) < 0.5f,
           "first loss is near log(V) for small random weights");
    expect(eager_losses[2] < eager_losses[0], "AdamW steps lower the loss");
    expect(bits_equal(replay.losses, eager.losses), "graph replay losses == eager losses, bit for bit");
    expect(bits_equal(replay.master, eager.master), "graph replay master weights == eager, bit for bit");
    expect(bits_equal(replay.m, eager.m) && bits_equal(replay.v, eager.v), "graph replay moments == eager");
    expect(bits_equal(replay.params, eager.params), "graph replay bf16 weights == eager");
    expect(bits_equal(replay.dx, eager.dx), "graph replay input gradient == eager");
    expect(model.state.to_host()[0].step == steps, "each replay advanced the optimizer's step counter");
}

}  // namespace

int main(int argc, char** argv) {
    return weft_test::run_device_test(argc, argv, {"kernels", "graph", "attention_mma"}, test_argument_validation,
                                      [](std::string_view part) {
                                          if (part == "kernels") {
                                              test_device_buffer();
                                              test_convert();
                                              test_linear<float>(37, 64, 80);
                                              test_linear<bf16>(37, 64, 80);
                                              test_linear<float>(256, 768, 2304);
                                              // the column sums' row chunks (256 rows) with a
                                              // partial last one, and a partial column block
                                              test_linear<bf16>(600, 96, 40);
                                              test_gelu<float>();
                                              test_gelu<bf16>();
                                              test_layer_norm<float>(50, 96);
                                              test_layer_norm<bf16>(50, 768);
                                              // a warp's last pass over the columns partial
                                              test_layer_norm<float>(50, 100);
                                              test_layer_norm<bf16>(600, 100);
                                              // variance below epsilon: where epsilon goes shows
                                              test_layer_norm<float>(50, 96, 1e-3f, 0.0f);
                                              test_layer_norm<bf16>(50, 768, 1e-3f, 0.0f);
                                              test_cross_entropy<float>(24, 1000);
                                              test_cross_entropy<bf16>(24, 50257);
                                              test_cross_entropy<float>(24, 1000, 100.0f);
                                              test_cross_entropy<bf16>(24, 50257, 100.0f);
                                              test_mean(1);
                                              test_mean(1000);
                                              test_mean(5000);
                                              test_mean(100003);
                                              test_attention<float>(2, 33, 3, 64);
                                              test_attention<bf16>(1, 70, 2, 128);
                                              test_attention<float>(1, 5, 1, 32);
                                              test_cross_entropy_padded(24, 1000, 1024);
                                              // a last partial vector, unpadded rows unaligned
                                              test_cross_entropy_padded(24, 1001, 1024);
                                              test_cross_entropy_special_values();
                                              test_embedding<float>(3, 200, 300, 50);
                                              test_embedding<bf16>(2, 129, 64, 20);
                                              test_residual_add();
                                              test_adamw();
                                          } else if (part == "graph") {
                                              test_graph_replay();
                                          } else {
                                              // every head size; one to five and 16 64-row
                                              // tiles, full and partial
                                              test_flash_attention_mma(2, 33, 3, 64);
                                              test_flash_attention_mma(1, 16, 2, 32);
                                              test_flash_attention_mma(1, 64, 4, 32);
                                              test_flash_attention_mma(2, 130, 2, 96);
                                              test_flash_attention_mma(1, 200, 1, 128);
                                              test_flash_attention_mma(2, 70, 3, 128);
                                              test_flash_attention_mma(1, 300, 2, 64);
                                              test_flash_attention_mma(1, 1024, 2, 64);  // GPT-2's
                                          }
                                      });
}
