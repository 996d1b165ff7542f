// Every kernel exec::cuda launches, its own source compiled by the host compiler and run on an
// emulated thread block (weft/exec/cuda/simt_emulation.hpp, simt_wmma.hpp), against the double
// reference, the CPU backend or the host's own update: no GPU needed. CI runs it under
// AddressSanitizer+UBSan (an access past a buffer's end) and ThreadSanitizer (a missing
// __syncthreads or __syncwarp is a data race between a block's host threads).
//   - both flash attention kernel sets (the WMMA kernels exec::cuda runs by default,
//     kernels/flash_attention_kernels.cuh, and the mma.sync ones,
//     kernels/flash_attention_mma_kernels.cuh) with the delta kernel they share;
//   - the fused one-pass cross-entropy and the mean of its losses
//     (kernels/cross_entropy_kernels.cuh), and the vocabulary-parallel loss's passes over two
//     ranks (kernels/vocab_parallel_loss_kernels.cuh);
//   - the chunked column sums of the bias and LayerNorm weight gradients
//     (kernels/column_sums_kernels.cuh), in two-dimensional blocks, and LayerNorm's forward,
//     residual forward and input backward (kernels/layer_norm_kernels.cuh);
//   - the embedding's lookups and backward (kernels/embedding_kernels.cuh);
//   - AdamW with its device-side state, SGD, the averaging's scale and the gradient summary
//     (kernels/adamw_kernels.cuh, kernels/optimizer_step_kernels.cuh), bit for bit where the
//     GPU tests are;
//   - GELU, the residual add and the conversions (kernels/*_kernels.cuh).
// What it can show: any error of indexing, masking, the online softmax, the saved statistics,
// the backward's formulas or which buffer a step reads, and a cp.async read before its wait
// (its bytes are NaN until the wait for its group). What it cannot: races between blocks (they
// run one after another) and the GPU's own rounding of fp32 sums (the tolerances are the GPU
// tests').
//
// Attention shapes: every head size, one to three 64-row tiles, full and partial, more than
// one batch and head, as test_cuda_attention_mma's (fewer: each block here runs 128 host
// threads, slowly under ThreadSanitizer).
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_reference.hpp"
#include "device_check.hpp"
#include "weft/exec/cuda/kernels/adamw_kernels.cuh"
#include "weft/exec/cuda/kernels/column_sums_kernels.cuh"
#include "weft/exec/cuda/kernels/convert_kernels.cuh"
#include "weft/exec/cuda/kernels/cross_entropy_kernels.cuh"
#include "weft/exec/cuda/kernels/embedding_kernels.cuh"
#include "weft/exec/cuda/kernels/flash_attention_kernels.cuh"
#include "weft/exec/cuda/kernels/flash_attention_mma_kernels.cuh"
#include "weft/exec/cuda/kernels/gelu_kernels.cuh"
#include "weft/exec/cuda/kernels/layer_norm_kernels.cuh"
#include "weft/exec/cuda/kernels/optimizer_step_kernels.cuh"
#include "weft/exec/cuda/kernels/residual_add_kernels.cuh"
#include "weft/exec/cuda/kernels/vocab_parallel_loss_kernels.cuh"
#include "weft/exec/token_groups.hpp"
#include "weft/optim/adamw_update.hpp"
#include "weft/optim/sgd_update.hpp"

namespace {

namespace flash = weft::exec::cuda_detail::flash;
namespace mma = weft::exec::cuda_detail::flash_mma;
namespace simt = weft::exec::cuda_detail::simt;
using weft::exec::cuda_detail::bf16;
using weft_test::bits_equal;
using weft_test::expect;
using weft_test::expect_close;
using weft_test::max_abs;
using weft_test::vec;

// n values of N(0, 1) rounded to bf16, as floats (exact in bf16).
vec random_bf16_values(std::size_t n, unsigned seed) {
    std::mt19937 generator(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    vec values(n);
    for (float& v : values) v = __bfloat162float(__float2bfloat16_rn(normal(generator)));
    return values;
}

std::vector<bf16> to_bf16(const vec& values) {
    std::vector<bf16> out;
    out.reserve(values.size());
    for (const float v : values) out.push_back(__float2bfloat16_rn(v));
    return out;
}

vec to_float(const std::vector<bf16>& values) {
    vec out;
    out.reserve(values.size());
    for (const bf16 v : values) out.push_back(__bfloat162float(v));
    return out;
}

// bf16 NaNs: an element the kernels leave unwritten fails every comparison.
std::vector<bf16> unwritten(std::size_t n) {
    return std::vector<bf16>(n, __float2bfloat16_rn(std::nanf("")));
}

// log sum_j<=i exp(scale q_i . k_j) per (batch, head, query), in double.
vec reference_lse(const vec& qkv, int batch, int seq, int heads, int head_dim) {
    const int C = heads * head_dim;
    const double scale = 1.0 / std::sqrt(double(head_dim));
    vec lse(std::size_t(batch) * heads * seq);
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < seq; ++i) {
                std::vector<double> scores;
                for (int j = 0; j <= i; ++j) {
                    double dot = 0;
                    for (int d = 0; d < head_dim; ++d)
                        dot += double(qkv[std::size_t(b * seq + i) * 3 * C + std::size_t(h * head_dim + d)]) *
                               double(qkv[std::size_t(b * seq + j) * 3 * C + std::size_t(C + h * head_dim + d)]);
                    scores.push_back(dot * scale);
                }
                const double top = *std::max_element(scores.begin(), scores.end());
                double sum = 0;
                for (const double s : scores) sum += std::exp(s - top);
                lse[(std::size_t(b) * heads + std::size_t(h)) * std::size_t(seq) + std::size_t(i)] =
                    float(top + std::log(sum));
            }
    return lse;
}

// delta_i = dout_i . out_i per (batch, head, query): both backward passes' first step, by the
// delta kernel they share (one warp per row and head, 256 threads a block, as launch_delta).
vec delta_of(const std::vector<bf16>& out, const std::vector<bf16>& dout, int batch, int seq, int heads, int head_dim) {
    const int rows = batch * seq, threads = 256;
    vec delta(std::size_t(rows) * std::size_t(heads), std::nanf(""));
    const unsigned blocks = unsigned((rows * heads * 32 + threads - 1) / threads);
    simt::launch({blocks, 1, 1}, threads, 0,
                 [&] { flash::delta_kernel<bf16>(out.data(), dout.data(), delta.data(), rows, seq, heads, head_dim); });
    return delta;
}

enum class kernel_set { wmma, mma };

template <int D>
void check_kernels(kernel_set set, int batch, int seq, int heads) {
    const std::string tag = std::string(set == kernel_set::mma ? " (mma, emulated) " : " (wmma, emulated) ") +
                            std::to_string(batch) + "x" + std::to_string(seq) + "x" + std::to_string(heads) + "x" +
                            std::to_string(D);
    const int C = heads * D;
    const std::size_t rows = std::size_t(batch) * std::size_t(seq);
    const vec qkv = random_bf16_values(rows * 3 * std::size_t(C), 52);
    const vec dout = random_bf16_values(rows * std::size_t(C), 53);
    const std::vector<bf16> qkv16 = to_bf16(qkv), dout16 = to_bf16(dout);
    const simt::index3 grid{unsigned(heads), unsigned(batch), unsigned((seq + flash::tile - 1) / flash::tile)};
    const float scale = 1.0f / std::sqrt(float(D)), scale_log2 = scale * mma::log2e;

    std::vector<bf16> out16 = unwritten(rows * std::size_t(C));
    vec lse(std::size_t(batch) * heads * seq, std::nanf(""));
    if (set == kernel_set::mma)
        simt::launch(grid, mma::threads, mma::forward_shared_bytes<D>(),
                     [&] { mma::forward_kernel<D>(qkv16.data(), out16.data(), lse.data(), seq, heads, scale_log2); });
    else
        simt::launch(grid, flash::threads, flash::forward_shared_bytes<D>(),
                     [&] { flash::forward_kernel<D>(qkv16.data(), out16.data(), lse.data(), seq, heads, scale); });
    float max_v = 0;
    for (std::size_t r = 0; r < rows; ++r)
        for (int c = 2 * C; c < 3 * C; ++c) max_v = std::max(max_v, std::fabs(qkv[r * 3 * std::size_t(C) + c]));
    expect_close("flash attention forward" + tag, to_float(out16),
                 weft_test::attention_forward(qkv, batch, seq, heads, D), 8e-3, std::ldexp(max_v, -7));
    expect_close("flash attention forward lse" + tag, lse, reference_lse(qkv, batch, seq, heads, D), 1e-5, 1e-4);

    const vec delta = delta_of(out16, dout16, batch, seq, heads, D);
    std::vector<bf16> dqkv16 = unwritten(qkv.size());
    if (set == kernel_set::mma) {
        simt::launch(grid, mma::threads, mma::key_value_shared_bytes<D>(), [&] {
            mma::backward_key_value_kernel<D>(qkv16.data(), dout16.data(), lse.data(), delta.data(), dqkv16.data(), seq,
                                              heads, scale, scale_log2);
        });
        simt::launch(grid, mma::threads, mma::query_shared_bytes<D>(), [&] {
            mma::backward_query_kernel<D>(qkv16.data(), dout16.data(), lse.data(), delta.data(), dqkv16.data(), seq,
                                          heads, scale, scale_log2);
        });
    } else {
        simt::launch(grid, flash::threads, flash::key_value_shared_bytes<D>(), [&] {
            flash::backward_key_value_kernel<D>(qkv16.data(), dout16.data(), lse.data(), delta.data(), dqkv16.data(),
                                                seq, heads, scale);
        });
        simt::launch(grid, flash::threads, flash::query_shared_bytes<D>(), [&] {
            flash::backward_query_kernel<D>(qkv16.data(), dout16.data(), lse.data(), delta.data(), dqkv16.data(), seq,
                                            heads, scale);
        });
    }
    const vec want_dqkv = weft_test::attention_backward(qkv, dout, batch, seq, heads, D);
    expect_close("flash attention backward" + tag, to_float(dqkv16), want_dqkv, 2e-2, 1e-2 * max_abs(want_dqkv));
}

// The fused cross-entropy, one block of 256 threads per row, as cross_entropy_forward_backward
// launches it, and mean_kernel over the losses: bf16 logits around `offset` (at 100, exp of a
// logit overflows a float: only a kernel that subtracts the row's maximum stays finite),
// against the CPU backend. `stride` > classes pads the rows, whose padding must get exact
// zero gradients; one row's label is out of range, and its loss and gradient must be NaN.
template <bool Vectorized>
void check_cross_entropy(int rows, int classes, int stride, float offset) {
    namespace ce = weft::exec::cuda_detail::detail;
    const std::string tag = std::string(Vectorized ? " (16-byte loads" : " (one element at a time") + ", emulated) " +
                            std::to_string(rows) + "x" + std::to_string(classes) + " stride " + std::to_string(stride) +
                            ", logits around " + std::to_string(int(offset));
    vec logits = random_bf16_values(std::size_t(rows) * std::size_t(classes), 40);
    for (float& v : logits) v = __bfloat162float(__float2bfloat16_rn(3.0f * v + offset));
    std::vector<bf16> padded(std::size_t(rows) * std::size_t(stride), __float2bfloat16_rn(7.0f));
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < classes; ++c)
            padded[std::size_t(r) * std::size_t(stride) + std::size_t(c)] =
                __float2bfloat16_rn(logits[std::size_t(r) * std::size_t(classes) + std::size_t(c)]);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) labels[std::size_t(r)] = (r * 7919) % classes;
    const int invalid_row = rows - 1;
    std::vector<std::int32_t> with_invalid = labels;
    with_invalid[std::size_t(invalid_row)] = classes;

    const float scale = 0.5f;
    vec losses(std::size_t(rows), std::nanf(""));
    std::vector<bf16> dlogits = unwritten(padded.size());
    simt::launch({unsigned(rows), 1, 1}, int(ce::cross_entropy_threads), 0, [&] {
        ce::cross_entropy_kernel<Vectorized>(padded.data(), with_invalid.data(), losses.data(), dlogits.data(), classes,
                                             stride, scale / float(rows));
    });
    vec want_dlogits;
    // The CPU backend over the valid rows: their mean loss, and gradients scaled as the kernel's
    // (scale over all the rows).
    const float want_loss =
        weft_test::cross_entropy(vec(logits.begin(), logits.begin() + std::ptrdiff_t(invalid_row) * classes),
                                 std::vector<std::int32_t>(labels.begin(), labels.begin() + invalid_row), invalid_row,
                                 classes, scale * float(invalid_row) / float(rows), want_dlogits);
    vec got_dlogits, padding;
    for (int r = 0; r < invalid_row; ++r)
        for (int c = 0; c < stride; ++c) {
            const float d = __bfloat162float(dlogits[std::size_t(r) * std::size_t(stride) + std::size_t(c)]);
            (c < classes ? got_dlogits : padding).push_back(d);
        }
    expect_close("cross_entropy dlogits" + tag, got_dlogits, want_dlogits, 8e-3, 1e-3 * max_abs(want_dlogits));
    expect(std::all_of(padding.begin(), padding.end(), [](float d) { return d == 0.0f; }),
           "cross_entropy: exact zero gradients in the padding" + tag);
    bool invalid_is_nan = std::isnan(losses[std::size_t(invalid_row)]);
    for (int c = 0; c < classes; ++c)
        invalid_is_nan =
            invalid_is_nan && std::isnan(__bfloat162float(dlogits[std::size_t(invalid_row) * std::size_t(stride) + c]));
    expect(invalid_is_nan, "cross_entropy: an out-of-range label gives a NaN loss and gradient" + tag);

    // The mean of the valid rows' losses, by the one-block mean kernel (1,024 threads).
    vec mean(1, std::nanf(""));
    simt::launch({1, 1, 1}, int(ce::mean_threads), 0,
                 [&] { ce::mean_kernel(losses.data(), invalid_row, mean.data()); });
    expect_close("cross_entropy mean loss" + tag, mean, vec{want_loss}, 1e-5, 0.0);
}

// What a row adds to the two sums of each column in check_column_sums: x, and x times y.
struct sum_and_products {
    const float* x;
    const float* y;
    __device__ void operator()(int /*row*/, std::size_t i, float (&sums)[2]) const {
        sums[0] += x[i];
        sums[1] += x[i] * y[i];
    }
};

// Both passes of the column sums as column_sums() launches them (32 x 8 threads a block, a
// block per chunk of 256 rows and 32 columns; then 256 threads a block, a thread per column),
// adding to outputs that start at 0.5, against double sums. Rows and columns partial in their
// last chunk and tile.
void check_column_sums(int rows, int cols) {
    namespace cs = weft::exec::cuda_detail::detail;
    const std::string tag = " (emulated) " + std::to_string(rows) + "x" + std::to_string(cols);
    const vec x = random_bf16_values(std::size_t(rows) * std::size_t(cols), 70);
    const vec y = random_bf16_values(x.size(), 71);
    const auto chunks = unsigned(weft::exec::cuda_detail::column_sum_chunks(rows));
    const auto tiles = unsigned((cols + cs::column_sum_columns - 1) / cs::column_sum_columns);
    vec partials(weft::exec::cuda_detail::column_sum_scratch_floats(rows, cols, 2), std::nanf(""));
    vec sums(std::size_t(cols), 0.5f), products(std::size_t(cols), 0.5f);
    simt::launch({chunks, tiles, 1}, simt::index3{cs::column_sum_columns, cs::column_sum_warps, 1}, 0, [&] {
        cs::column_partials_kernel<2>(sum_and_products{x.data(), y.data()}, partials.data(), rows, cols);
    });
    simt::launch({unsigned((cols + 255) / 256), 1, 1}, 256, 0, [&] {
        cs::add_column_partials_kernel<2>(partials.data(), int(chunks), cols,
                                          cs::column_outputs<2>{{sums.data(), products.data()}});
    });
    vec want_sums(static_cast<std::size_t>(cols)), want_products(static_cast<std::size_t>(cols));
    for (int c = 0; c < cols; ++c) {
        double sum = 0.5, product = 0.5;
        for (int r = 0; r < rows; ++r) {
            const std::size_t i = std::size_t(r) * std::size_t(cols) + std::size_t(c);
            sum += double(x[i]);
            product += double(x[i]) * double(y[i]);
        }
        want_sums[std::size_t(c)] = float(sum);
        want_products[std::size_t(c)] = float(product);
    }
    expect_close("column sums, first" + tag, sums, want_sums, 1e-5, 1e-4 * max_abs(want_sums));
    expect_close("column sums, second" + tag, products, want_products, 1e-5, 1e-4 * max_abs(want_products));
}

// LayerNorm's kernels as exec::cuda launches them (bf16 rows, fp32 weight and bias; a warp per
// row, 8 rows a block), the last block partial and rows off a multiple of 32 columns: the
// forward and its residual form against the CPU backend, whose statistics (of the rounded
// sum, in the residual form) and input gradient they must match. Rows of spread 2 around 3:
// a kernel that drops the mean, or takes the variance about zero, is far off.
void check_layer_norm(int rows, int cols) {
    namespace ln = weft::exec::cuda_detail::detail;
    const std::string tag = " (emulated) " + std::to_string(rows) + "x" + std::to_string(cols);
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    vec a = random_bf16_values(n, 80), b = random_bf16_values(n, 81);
    for (float& v : a) v = __bfloat162float(__float2bfloat16_rn(2.0f * v + 3.0f));
    const vec gamma = random_bf16_values(std::size_t(cols), 82), beta = random_bf16_values(std::size_t(cols), 83);
    const vec dy = random_bf16_values(n, 84);
    const std::vector<bf16> a16 = to_bf16(a), b16 = to_bf16(b), dy16 = to_bf16(dy);
    const float eps = 1e-5f;
    const unsigned blocks = unsigned((rows + ln::layer_norm_rows_per_block - 1) / ln::layer_norm_rows_per_block);
    const int threads = 32 * ln::layer_norm_rows_per_block;

    std::vector<bf16> y16 = unwritten(n);
    vec mean(std::size_t(rows), std::nanf("")), rstd(std::size_t(rows), std::nanf(""));
    simt::launch({blocks, 1, 1}, threads, 0, [&] {
        ln::layer_norm_forward_kernel<bf16, float>(a16.data(), gamma.data(), beta.data(), y16.data(), mean.data(),
                                                   rstd.data(), rows, cols, eps);
    });
    vec want_mean, want_rstd;
    const vec want_y = weft_test::layer_norm_forward(a, gamma, beta, rows, cols, want_mean, want_rstd);
    expect_close("layer_norm_forward y" + tag, to_float(y16), want_y, 8e-3, 8e-3);
    expect_close("layer_norm_forward mean" + tag, mean, want_mean, 1e-5, 1e-6);
    expect_close("layer_norm_forward rstd" + tag, rstd, want_rstd, 1e-4, 0.0);

    std::vector<bf16> dx16 = unwritten(n);
    simt::launch({blocks, 1, 1}, threads, 0, [&] {
        ln::layer_norm_backward_input_kernel<bf16, float>(a16.data(), mean.data(), rstd.data(), gamma.data(),
                                                          dy16.data(), dx16.data(), rows, cols);
    });
    const vec want_dx = weft_test::layer_norm_backward_input(a, want_mean, want_rstd, gamma, dy, rows, cols);
    expect_close("layer_norm_backward_input" + tag, to_float(dx16), want_dx, 2e-2, 8e-3 * max_abs(want_dx));

    // The residual form: the sum a + b rounded to bf16 (exactly as the host rounds it), then the
    // forward of that rounded sum.
    std::vector<bf16> sum16 = unwritten(n), residual_y16 = unwritten(n);
    vec residual_mean(std::size_t(rows), std::nanf("")), residual_rstd(std::size_t(rows), std::nanf(""));
    simt::launch({blocks, 1, 1}, threads, 0, [&] {
        ln::residual_layer_norm_forward_kernel<bf16, float>(a16.data(), b16.data(), sum16.data(), gamma.data(),
                                                            beta.data(), residual_y16.data(), residual_mean.data(),
                                                            residual_rstd.data(), rows, cols, eps);
    });
    vec want_sum(n);
    for (std::size_t i = 0; i < n; ++i) want_sum[i] = __bfloat162float(__float2bfloat16_rn(a[i] + b[i]));
    expect_close("residual_layer_norm_forward sum" + tag, to_float(sum16), want_sum, 0.0, 0.0);
    const vec want_residual_y = weft_test::layer_norm_forward(want_sum, gamma, beta, rows, cols, want_mean, want_rstd);
    expect_close("residual_layer_norm_forward y" + tag, to_float(residual_y16), want_residual_y, 8e-3, 8e-3);
    expect_close("residual_layer_norm_forward mean" + tag, residual_mean, want_mean, 1e-5, 1e-6);
    expect_close("residual_layer_norm_forward rstd" + tag, residual_rstd, want_rstd, 1e-4, 0.0);
}

// The embedding's kernels as exec::cuda launches them (fp32 tables, bf16 activations and
// gradients; 256 threads a block), the grid-stride loops given fewer blocks than elements so
// that each thread takes several, and the token sums' rows of blocks over a width of two
// column tiles, the second partial. Tokens repeat (a token's rows are summed in order) and
// some never occur (their rows must stay as they were). Against the CPU backend; then a
// rank's vocabulary slice, rows [first_row, first_row + held_rows), as tensor parallelism
// splits it.
void check_embedding() {
    namespace em = weft::exec::cuda_detail::detail;
    constexpr int sequences = 3, seq_len = 5, width = 300, vocab = 11, rows = sequences * seq_len;
    const std::string tag = " (emulated) " + std::to_string(sequences) + "x" + std::to_string(seq_len) + "x" +
                            std::to_string(width) + ", vocab " + std::to_string(vocab);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) tokens[std::size_t(r)] = (r * r + 3) % 7 + 2;  // ids 2 to 8, some repeated
    const vec wte = random_bf16_values(std::size_t(vocab) * width, 90);
    const vec wpe = random_bf16_values(std::size_t(seq_len) * width, 91);
    const vec dy = random_bf16_values(std::size_t(rows) * width, 92);
    const std::vector<bf16> dy16 = to_bf16(dy);
    const int threads = 256;
    const unsigned few_blocks = 3;  // 768 threads for 4,500 elements

    std::vector<bf16> out16 = unwritten(std::size_t(rows) * width);
    std::vector<std::int32_t> with_invalid = tokens;
    with_invalid[7] = vocab;
    simt::launch({few_blocks, 1, 1}, threads, 0, [&] {
        em::embedding_forward_kernel<bf16, float>(with_invalid.data(), wte.data(), wpe.data(), out16.data(), rows,
                                                  seq_len, width, vocab);
    });
    const vec want_out = weft_test::embedding_forward(tokens, wte, wpe, vocab, width, seq_len);
    vec got_valid, want_valid;
    bool invalid_row_is_nan = true;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < width; ++c) {
            const std::size_t i = std::size_t(r) * width + std::size_t(c);
            if (r == 7) {
                invalid_row_is_nan = invalid_row_is_nan && std::isnan(__bfloat162float(out16[i]));
                continue;
            }
            got_valid.push_back(__bfloat162float(out16[i]));
            want_valid.push_back(want_out[i]);
        }
    expect_close("embedding_forward" + tag, got_valid, want_valid, 4e-3, 0.0);
    expect(invalid_row_is_nan, "embedding_forward: a token outside the vocabulary gives a NaN row" + tag);

    // The backward into gradients that start at 0.5, over the whole vocabulary.
    const std::vector<std::int32_t> groups = weft::exec::group_rows_by_token(tokens, 0, vocab);
    vec dwte(wte.size(), 0.5f), dwpe(wpe.size(), 0.5f);
    const unsigned tiles = unsigned((width + em::embedding_token_threads - 1) / em::embedding_token_threads);
    simt::launch({few_blocks, 1, 1}, threads, 0, [&] {
        em::embedding_backward_position_kernel<bf16>(dy16.data(), dwpe.data(), sequences, seq_len, width);
    });
    simt::launch({unsigned(rows), tiles, 1}, em::embedding_token_threads, 0, [&] {
        em::embedding_backward_token_kernel<bf16>(groups.data(), rows, dy16.data(), dwte.data(), 0, width);
    });
    vec want_dwte(wte.size(), 0.5f), want_dwpe(wpe.size(), 0.5f);
    weft_test::embedding_backward(tokens, dy, vocab, width, seq_len, want_dwte, want_dwpe);
    expect_close("embedding_backward dwte" + tag, dwte, want_dwte, 1e-5, 1e-6);
    expect_close("embedding_backward dwpe" + tag, dwpe, want_dwpe, 1e-5, 1e-6);

    // A rank's slice: rows 4 to 8 of the vocabulary. Its lookup gives those tokens' rows and
    // zeros for the others; its backward writes only its rows.
    constexpr int first_row = 4, held_rows = 5;
    const vec wte_rows(wte.begin() + std::ptrdiff_t(first_row) * width,
                       wte.begin() + std::ptrdiff_t(first_row + held_rows) * width);
    vec lookup(std::size_t(rows) * width, std::nanf(""));
    simt::launch({few_blocks, 1, 1}, threads, 0, [&] {
        em::vocab_slice_lookup_kernel<float>(tokens.data(), wte_rows.data(), first_row, held_rows, lookup.data(), rows,
                                             width);
    });
    vec want_lookup(lookup.size(), 0.0f);
    for (int r = 0; r < rows; ++r)
        if (const int t = tokens[std::size_t(r)]; t >= first_row && t < first_row + held_rows)
            std::copy_n(wte.begin() + std::ptrdiff_t(t) * width, width,
                        want_lookup.begin() + std::ptrdiff_t(r) * width);
    expect_close("vocab_slice_lookup" + tag, lookup, want_lookup, 0.0, 0.0);

    const std::vector<std::int32_t> slice_groups = weft::exec::group_rows_by_token(tokens, first_row, held_rows);
    vec dwte_rows(wte_rows.size(), 0.5f);
    simt::launch({unsigned(rows), tiles, 1}, em::embedding_token_threads, 0, [&] {
        em::embedding_backward_token_kernel<bf16>(slice_groups.data(), rows, dy16.data(), dwte_rows.data(), first_row,
                                                  width);
    });
    const vec want_dwte_rows(want_dwte.begin() + std::ptrdiff_t(first_row) * width,
                             want_dwte.begin() + std::ptrdiff_t(first_row + held_rows) * width);
    expect_close("embedding_backward, a vocabulary slice" + tag, dwte_rows, want_dwte_rows, 1e-5, 1e-6);
}

// The vocabulary-parallel cross-entropy's kernels over a group of two ranks, each holding half
// of the vocabulary's columns (the second one more, an odd vocabulary), with the group's
// reductions done here as exec::cuda's vocab_parallel_cross_entropy does them between the
// passes: each rank's row maxima, the all-gather's blocks reduced by max_over_blocks_kernel,
// each rank's sums of exp and label term with the group's maxima, their sum over the ranks,
// the rows' losses by loss_terms_kernel, then each rank's gradient. Kernels one block of 256
// threads a row, as the launches. Losses and gradients against the CPU backend's
// cross-entropy over the whole vocabulary; logits around `offset` (100 overflows exp).
void check_vocab_parallel_loss(int rows, int classes, float offset) {
    namespace vp = weft::exec::cuda_detail::detail;
    const std::string tag = " (emulated, 2 ranks) " + std::to_string(rows) + "x" + std::to_string(classes) +
                            ", logits around " + std::to_string(int(offset));
    vec logits = random_bf16_values(std::size_t(rows) * std::size_t(classes), 95);
    for (float& v : logits) v = __bfloat162float(__float2bfloat16_rn(3.0f * v + offset));
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) labels[std::size_t(r)] = (r * 7919) % classes;
    const int threads = int(vp::vocab_loss_threads);
    constexpr int ranks = 2;
    const int first_columns[ranks] = {0, classes / 2};
    const int widths[ranks] = {classes / 2, classes - classes / 2};
    std::vector<bf16> slices[ranks];
    for (int q = 0; q < ranks; ++q)
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < widths[q]; ++c)
                slices[q].push_back(__float2bfloat16_rn(
                    logits[std::size_t(r) * std::size_t(classes) + std::size_t(first_columns[q] + c)]));

    vec gathered(std::size_t(ranks) * std::size_t(rows), std::nanf(""));  // the all-gather: rank q's maxima at q * rows
    for (int q = 0; q < ranks; ++q)
        simt::launch({unsigned(rows), 1, 1}, threads, 0, [&] {
            vp::row_max_kernel<bf16>(slices[q].data(), gathered.data() + std::ptrdiff_t(q) * rows, widths[q]);
        });
    vec max(std::size_t(rows), std::nanf(""));
    simt::launch({1, 1, 1}, threads, 0, [&] { vp::max_over_blocks_kernel(gathered.data(), rows, ranks, max.data()); });
    vec want_max(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r)
        want_max[std::size_t(r)] = *std::max_element(logits.begin() + std::ptrdiff_t(r) * classes,
                                                     logits.begin() + std::ptrdiff_t(r + 1) * classes);
    expect_close("vocab-parallel row maxima" + tag, max, want_max, 0.0, 0.0);

    vec sums(2 * std::size_t(rows), 0.0f);  // the all-reduce: the ranks' sums, added
    for (int q = 0; q < ranks; ++q) {
        vec rank_sums(2 * std::size_t(rows), std::nanf(""));
        simt::launch({unsigned(rows), 1, 1}, threads, 0, [&] {
            vp::softmax_partial_sums_kernel<bf16>(slices[q].data(), max.data(), labels.data(), first_columns[q],
                                                  widths[q], rows, rank_sums.data());
        });
        for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += rank_sums[i];
    }
    vec terms(std::size_t(rows), std::nanf(""));
    simt::launch({1, 1, 1}, threads, 0, [&] { vp::loss_terms_kernel(sums.data(), rows, terms.data()); });
    const float scale = 0.5f;
    vec want_dlogits;
    const float want_loss = weft_test::cross_entropy(logits, labels, rows, classes, scale, want_dlogits);
    double loss = 0;
    for (const float t : terms) loss += double(t);
    expect_close("vocab-parallel loss" + tag, vec{float(loss / rows)}, vec{want_loss}, 1e-5, 1e-5);

    vec dlogits(logits.size(), std::nanf(""));
    for (int q = 0; q < ranks; ++q) {
        std::vector<bf16> d = unwritten(slices[q].size());
        simt::launch({unsigned(rows), 1, 1}, threads, 0, [&] {
            vp::softmax_gradient_kernel<bf16>(slices[q].data(), max.data(), sums.data(), labels.data(),
                                              first_columns[q], widths[q], scale / float(rows), d.data());
        });
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < widths[q]; ++c)
                dlogits[std::size_t(r) * std::size_t(classes) + std::size_t(first_columns[q] + c)] =
                    __bfloat162float(d[std::size_t(r) * std::size_t(widths[q]) + std::size_t(c)]);
    }
    expect_close("vocab-parallel dlogits" + tag, dlogits, want_dlogits, 8e-3, 1e-3 * max_abs(want_dlogits));
}

// AdamW as exec::cuda runs it, three steps over flat buffers of a decaying range and one that
// does not: the state kernels (hyperparameters set by one, each step's scalars formed by the
// other in device memory) and the update kernel writing the bf16 copy; then adamw_exact_kernel
// (the optimizer-kernel interface's update) with a gradient scale. Both against
// optim::adamw_update_on_host bit for bit, as on a GPU: the same IEEE-rounded operations in
// the same order. beta1 above 0.5 and below take torch.lerp's two forms. Grid-stride loops of
// 2 blocks for 1,000 elements.
void check_adamw(double beta1) {
    namespace op = weft::exec::cuda_detail::detail;
    const std::string tag = " (emulated) beta1 " + std::to_string(beta1).substr(0, 3);
    constexpr std::size_t n = 1000, decaying = 700;
    weft::optim::adamw_options options;
    options.lr = 1e-2;
    options.beta1 = beta1;
    options.beta2 = 0.95;
    options.eps = 1e-6;
    options.weight_decay = 0.1;
    const vec start = random_bf16_values(n, 100);
    vec params = start, m(n, 0.0f), v(n, 0.0f), want_params = start, want_m(n, 0.0f), want_v(n, 0.0f);
    std::vector<bf16> params16 = unwritten(n);
    weft::exec::cuda_detail::adamw_state state{};
    simt::launch({1, 1, 1}, 1, 0, [&] {
        op::adamw_set_hyperparameters_kernel(&state, options.lr, options.beta1, options.beta2, options.eps,
                                             options.weight_decay);
    });
    bool factors_match = true;
    for (unsigned step = 1; step <= 3; ++step) {
        const vec grads = random_bf16_values(n, 100 + step);
        simt::launch({1, 1, 1}, 1, 0, [&] { op::adamw_begin_step_kernel(&state); });
        const auto want = weft::exec::cuda_detail::adamw_step_factors::of_step(options, step, 1.0f);
        factors_match =
            factors_match && state.step == step &&
            bits_equal(vec{state.factors.decay, state.factors.beta1, state.factors.one_minus_beta1, state.factors.beta2,
                           state.factors.one_minus_beta2, state.factors.step_size, state.factors.bias_correction2_sqrt,
                           state.factors.eps, state.factors.grad_scale},
                       vec{want.decay, want.beta1, want.one_minus_beta1, want.beta2, want.one_minus_beta2,
                           want.step_size, want.bias_correction2_sqrt, want.eps, want.grad_scale}) &&
            state.factors.lerp_from_start == want.lerp_from_start;
        for (const auto& [first, size, decays] :
             {std::tuple{std::size_t(0), decaying, true}, std::tuple{decaying, n - decaying, false}}) {
            simt::launch({2, 1, 1}, 256, 0, [&] {
                op::adamw_update_kernel(params.data() + first, grads.data() + first, m.data() + first, v.data() + first,
                                        params16.data() + first, size, decays, &state);
            });
            const auto range = [&](vec& x) { return std::span<float>(x).subspan(first, size); };
            weft::optim::adamw_update_on_host<float>(range(want_params),
                                                     std::span<const float>(grads).subspan(first, size), range(want_m),
                                                     range(want_v), want, decays);
        }
    }
    expect(factors_match, "adamw_begin_step: the step count and each step's scalars as of_step's, bit for bit" + tag);
    expect(bits_equal(params, want_params) && bits_equal(m, want_m) && bits_equal(v, want_v),
           "adamw_update: three steps' weights and moments as the host's, bit for bit" + tag);
    expect(bits_equal(to_float(params16), to_float(to_bf16(params))),
           "adamw_update: the bf16 copy of the weights" + tag);

    // The exact kernel with a gradient scale (clipping), one more step.
    const vec grads = random_bf16_values(n, 110);
    const auto scaled = weft::exec::cuda_detail::adamw_step_factors::of_step(options, 4, 0.25f);
    simt::launch({2, 1, 1}, 256, 0, [&] {
        op::adamw_exact_kernel<float>(params.data(), grads.data(), m.data(), v.data(), n, scaled, true);
    });
    weft::optim::adamw_update_on_host<float>(want_params, grads, want_m, want_v, scaled, true);
    expect(bits_equal(params, want_params) && bits_equal(m, want_m) && bits_equal(v, want_v),
           "adamw_update_exact with a gradient scale, as the host's bit for bit" + tag);
}

// SGD's kernel (momentum, decay, a gradient scale; the first step starting the buffer, then a
// second) and the averaging's scale kernel, against optim::sgd_update_on_host and the host's
// product, bit for bit.
void check_sgd_and_scale() {
    namespace op = weft::exec::cuda_detail::detail;
    constexpr std::size_t n = 1000;
    vec params = random_bf16_values(n, 120), buffer(n, std::nanf("")), want_params = params, want_buffer(n, 0.0f);
    weft::optim::sgd_factors<float> f{.lr = 0.05f,
                                      .momentum = 0.9f,
                                      .weight_decay = 0.01f,
                                      .grad_scale = 0.5f,
                                      .use_momentum = true,
                                      .first_step = true};
    for (int step = 0; step < 2; ++step) {
        const vec grads = random_bf16_values(n, 121 + unsigned(step));
        simt::launch({2, 1, 1}, 256, 0,
                     [&] { op::sgd_exact_kernel<float>(params.data(), grads.data(), buffer.data(), n, f, true); });
        weft::optim::sgd_update_on_host<float>(want_params, grads, want_buffer, f, true);
        f.first_step = false;
    }
    expect(bits_equal(params, want_params) && bits_equal(buffer, want_buffer),
           "sgd_update_exact: two steps with momentum as the host's, bit for bit (emulated)");

    vec values = random_bf16_values(n, 125), want_values = values;
    simt::launch({2, 1, 1}, 256, 0, [&] { op::scale_kernel<float>(values.data(), n, 1.0f / 3.0f); });
    for (float& x : want_values) x *= 1.0f / 3.0f;
    expect(bits_equal(values, want_values), "scale_exact: as the host's product, bit for bit (emulated)");
}

// The gradient summary's two kernels as summarize_segments launches them (a row of blocks per
// segment, then one block over the partials): three segments of different lengths, the second
// not counted, against double sums; then a NaN in the uncounted segment, which only the total
// shows.
void check_gradient_summary() {
    namespace op = weft::exec::cuda_detail::detail;
    const std::vector<weft::exec::cuda_detail::gradient_segment> segments{{0, 300, 1}, {300, 2000, 0}, {2000, 2100, 1}};
    vec values = random_bf16_values(2100, 130);
    const int blocks_per_segment = int((1700 + op::summary_threads - 1) / op::summary_threads);  // the longest's
    const auto summarize = [&] {
        std::vector<double> partials(segments.size() * std::size_t(blocks_per_segment), std::nan(""));
        std::vector<double> result(2, std::nan(""));
        simt::launch({unsigned(blocks_per_segment), unsigned(segments.size()), 1}, int(op::summary_threads), 0,
                     [&] { op::segment_squares_kernel<float>(values.data(), segments.data(), partials.data()); });
        simt::launch({1, 1, 1}, int(op::summary_threads), 0, [&] {
            op::summary_total_kernel<float>(partials.data(), segments.data(), blocks_per_segment, partials.size(),
                                            result.data());
        });
        return result;
    };
    double counted = 0, total = 0;
    for (const auto& s : segments)
        for (std::size_t i = s.first; i < s.last; ++i) {
            const double square = double(values[i]) * double(values[i]);
            total += square;
            if (s.counted) counted += square;
        }
    const std::vector<double> sums = summarize();
    expect(std::fabs(sums[0] - counted) <= 1e-12 * counted && std::fabs(sums[1] - total) <= 1e-12 * total,
           "gradient summary: the counted and total sums of squares (emulated)");
    values[1234] = std::nanf("");
    const std::vector<double> with_nan = summarize();
    expect(std::fabs(with_nan[0] - counted) <= 1e-12 * counted && std::isnan(with_nan[1]),
           "gradient summary: a NaN in an uncounted segment shows in the total only (emulated)");
}

// The elementwise kernels, grid-stride loops of 3 blocks of 256 threads over 5,000 elements:
// GELU forward and backward (bf16) against the CPU backend with kernels_test's tolerances;
// the residual add in place (out = a), the conversions both ways and the conversion adding a
// periodic addend (a bias per row), each bit for bit against the host's rounding.
void check_elementwise() {
    namespace ew = weft::exec::cuda_detail::detail;
    constexpr std::size_t n = 5000, period = 250;
    const unsigned blocks = 3;
    vec x = random_bf16_values(n, 140);
    for (float& v : x) v = __bfloat162float(__float2bfloat16_rn(3.0f * v));
    const vec dy = random_bf16_values(n, 141), b = random_bf16_values(n, 142);
    const std::vector<bf16> x16 = to_bf16(x), dy16 = to_bf16(dy), b16 = to_bf16(b);
    std::vector<bf16> y16 = unwritten(n), dx16 = unwritten(n);
    simt::launch({blocks, 1, 1}, 256, 0, [&] { ew::gelu_forward_kernel<bf16>(x16.data(), y16.data(), n); });
    simt::launch({blocks, 1, 1}, 256, 0,
                 [&] { ew::gelu_backward_kernel<bf16>(x16.data(), dy16.data(), dx16.data(), n); });
    expect_close("gelu_forward (emulated)", to_float(y16), weft_test::gelu_forward(x), 2e-2, 4e-6);
    expect_close("gelu_backward (emulated)", to_float(dx16), weft_test::gelu_backward(x, dy), 2e-2, 4e-5);

    std::vector<bf16> sum16 = x16;  // in place: out is a
    simt::launch({blocks, 1, 1}, 256, 0,
                 [&] { ew::residual_add_kernel<bf16>(sum16.data(), b16.data(), sum16.data(), n); });
    vec want_sum(n);
    for (std::size_t i = 0; i < n; ++i) want_sum[i] = __bfloat162float(__float2bfloat16_rn(x[i] + b[i]));
    expect(bits_equal(to_float(sum16), want_sum), "residual_add in place, bit for bit (emulated)");

    const vec wide = random_bf16_values(n, 143);
    vec fine(n);
    for (std::size_t i = 0; i < n; ++i) fine[i] = wide[i] * (1.0f + 1.0f / 512.0f);  // bits below bf16's
    std::vector<bf16> narrow = unwritten(n);
    simt::launch({blocks, 1, 1}, 256, 0, [&] { ew::convert_kernel<float, bf16>(fine.data(), narrow.data(), n); });
    vec back(n, std::nanf(""));
    simt::launch({blocks, 1, 1}, 256, 0, [&] { ew::convert_kernel<bf16, float>(narrow.data(), back.data(), n); });
    expect(bits_equal(back, to_float(to_bf16(fine))), "convert fp32 to bf16 and back, bit for bit (emulated)");

    const vec addend = random_bf16_values(period, 144);
    std::vector<bf16> biased = unwritten(n);
    simt::launch({blocks, 1, 1}, 256, 0, [&] {
        ew::convert_adding_periodic_kernel<bf16>(fine.data(), addend.data(), period, biased.data(), n);
    });
    vec want_biased(n);
    for (std::size_t i = 0; i < n; ++i)
        want_biased[i] = __bfloat162float(__float2bfloat16_rn(fine[i] + addend[i % period]));
    expect(bits_equal(to_float(biased), want_biased), "convert_adding_periodic, bit for bit (emulated)");
}

// Runs one group of checks and prints its time: each emulated block is host threads taking
// turns at barriers, which is what the test's time is, most of all under ThreadSanitizer. An
// exception (an emulation check refusing what a kernel did, say) fails the group by name, and
// the other groups still run, so one run shows every group that fails.
template <class Checks>
void timed(const char* what, Checks checks) {
    const auto start = std::chrono::steady_clock::now();
    try {
        checks();
    } catch (const std::exception& e) {
        ++weft_test::failures;
        std::fprintf(stderr, "FAILED with an exception in %s: %s\n", what, e.what());
    }
    std::printf("%-26s %6.2f s\n", what,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

// With --race-check (the tsan preset's run), the attention kernels at one shape, GPT-2's head
// size over three tiles, the last partial: every barrier of their double-buffered loops, in
// the time ThreadSanitizer takes for one shape rather than four. The shapes' arithmetic is the
// other runs' to check.
int main(int argc, char** argv) {
    const bool race_check = argc == 2 && std::string(argv[1]) == "--race-check";
    if (argc > 2 || (argc == 2 && !race_check)) {
        std::fprintf(stderr, "usage: %s [--race-check]\n", argv[0]);
        return 2;
    }
    timed("column sums", [] {
        check_column_sums(600, 40);   // three chunks of rows, the last of 88; two tiles, the last of 8
        check_column_sums(100, 768);  // one chunk; GPT-2's width
    });
    timed("layer norm", [] {
        check_layer_norm(13, 100);  // two blocks, the second with 5 rows; 100 columns, 4 past a multiple of 32
        check_layer_norm(9, 768);   // GPT-2's width
    });
    timed("embedding", [] { check_embedding(); });
    timed("optimizer", [] {
        check_adamw(0.9);
        check_adamw(0.4);
        check_sgd_and_scale();
        check_gradient_summary();
    });
    timed("elementwise", [] { check_elementwise(); });
    timed("cross-entropy", [] {
        check_cross_entropy<true>(12, 1000, 1000, 0.0f);  // rows of whole 16-byte vectors
        // Padding within the last vector and past it, and large logits.
        check_cross_entropy<true>(12, 1001, 1016, 100.0f);
        check_cross_entropy<false>(12, 1001, 1003, 0.0f);  // rows off 16-byte alignment, padded
    });
    timed("vocabulary-parallel loss", [] {
        check_vocab_parallel_loss(6, 1001, 0.0f);   // slices of 500 and 501 columns
        check_vocab_parallel_loss(4, 600, 100.0f);  // large logits
    });
    for (const kernel_set set : {kernel_set::wmma, kernel_set::mma})
        timed(set == kernel_set::mma ? "attention (mma)" : "attention (wmma)", [set, race_check] {
            if (race_check) {
                check_kernels<64>(set, 1, 130, 1);
                return;
            }
            check_kernels<64>(set, 1, 70, 1);   // two tiles, the second partial
            check_kernels<32>(set, 2, 16, 2);   // one partial tile; two batches and heads
            check_kernels<96>(set, 1, 130, 1);  // three tiles
            check_kernels<128>(set, 1, 64, 1);  // one full tile: the diagonal alone
        });
    std::printf("%d check(s), %d failure(s)\n", weft_test::checks, weft_test::failures);
    return weft_test::failures == 0 ? 0 : 1;
}
