// The CPU compute backend: an object whose member kernels nn/ layers call on Eigen row-major
// matrices in host memory (rows = samples). float for training, double for gradient checks.
// Every kernel runs in a fixed order, so results are bit-reproducible. With threads (--threads,
// set_threads) the heavy kernels split their work into parts that each compute what one thread
// would (whole rows, whole columns, whole attention heads; element ranges that keep the data's
// alignment), so the losses stay those of one thread (tests/exec/cpu_threads_test.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "weft/core/deferred_value.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/exec/cpu_thread_pool.hpp"
#include "weft/exec/kernel_progress.hpp"
#include "weft/exec/softmax_rows.hpp"
#include "weft/optim/adamw_update.hpp"
#include "weft/optim/gradient_scale.hpp"
#include "weft/optim/gradient_summary.hpp"
#include "weft/optim/sgd_update.hpp"

namespace weft::exec {

template <class Scalar>
struct cpu_backend {
    static constexpr std::string_view name = "cpu";
    using scalar = Scalar;
    using memory_space = host_space;
    using matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

private:
    using const_map = Eigen::Map<const matrix>;
    using row_vector = Eigen::Matrix<Scalar, 1, Eigen::Dynamic>;
    using const_row_map = Eigen::Map<const row_vector>;
    using row_map = Eigen::Map<row_vector>;
    using array = Eigen::Array<Scalar, Eigen::Dynamic, 1>;

    // Elements [first, first + n) of a matrix's storage, as an array.
    template <class Dense>
    static auto flat(Dense& m, std::size_t first, std::size_t n) {
        using element = std::remove_reference_t<decltype(*m.data())>;
        using mapped = std::conditional_t<std::is_const_v<element>, const array, array>;
        return Eigen::Map<mapped>(m.data() + first, Eigen::Index(n));
    }

    static void require_size(std::size_t got, std::size_t want, std::string_view what) {
        if (got != want)
            throw invalid_argument(what, got, "must equal " + std::to_string(want));
    }
    static void require_shape(const matrix& m, Eigen::Index rows, Eigen::Index cols,
                              std::string_view what) {
        if (m.rows() != rows || m.cols() != cols)
            throw invalid_argument(what,
                                   std::to_string(m.rows()) + "x" + std::to_string(m.cols()),
                                   "shape must be " + std::to_string(rows) + "x" +
                                       std::to_string(cols));
    }
    static std::span<const Scalar> elements(const matrix& m) { return {m.data(), std::size_t(m.size())}; }
    // A pass of the vocabulary-parallel loss: one max (and one label) per row of logits.
    static void require_rows_of(const matrix& logits, std::size_t max_size, std::size_t labels_size,
                                std::string_view kernel) {
        require_size(max_size, std::size_t(logits.rows()), std::string(kernel) + ": max.size()");
        require_size(labels_size, std::size_t(logits.rows()), std::string(kernel) + ": labels.size()");
    }

    // The parts a kernel is split into for the pool. Rows: in units of 8, so that a part starts
    // where Eigen's GEMM starts a panel of the whole product (its panels are 4 or 8 rows of the
    // result; the rows left over after the last whole panel take another code path, which sums
    // in another order), and of at least 2 units (smaller parts cost more in waking threads than
    // they save). Elements: runs of whole cache lines from the matrix's start, so every part
    // sees the vector alignment the whole matrix has.
    static constexpr std::size_t rows_per_unit = 8;
    static constexpr std::size_t row_units_per_part = 2;
    static constexpr std::size_t elements_per_unit = 64;
    static constexpr std::size_t units_per_part = 64;

    // Calls piece(begin, end) over [0, count) split into parts of at least `grain`, on the pool.
    // Every threaded kernel starts here, on its calling thread: messages in flight move on first
    // (exec/kernel_progress.hpp).
    template <class Piece>
    void in_parts(std::size_t count, std::size_t grain, Piece&& piece) const {
        drive_kernel_progress();
        if (!pool_ || pool_->parts_for(count, grain) <= 1) {
            if (count > 0) piece(std::size_t(0), count);
            return;
        }
        pool_->for_parts(count, grain, std::function<void(std::size_t, std::size_t)>(std::forward<Piece>(piece)));
    }
    // In parts of whole rows: piece(first_row, row_count).
    template <class Piece>
    void in_row_parts(Eigen::Index rows, Piece&& piece) const {
        const auto count = std::size_t(rows);
        in_parts((count + rows_per_unit - 1) / rows_per_unit, row_units_per_part,
                 [&](std::size_t begin, std::size_t end) {
                     const std::size_t first = begin * rows_per_unit;
                     piece(Eigen::Index(first), Eigen::Index(std::min(count, end * rows_per_unit) - first));
                 });
    }
    // In parts of whole cache-line units of `count` elements: piece(first, count).
    template <class Piece>
    void in_element_parts(std::size_t count, Piece&& piece) const {
        const std::size_t units = (count + elements_per_unit - 1) / elements_per_unit;
        in_parts(units, units_per_part, [&](std::size_t begin, std::size_t end) {
            const std::size_t first = begin * elements_per_unit;
            piece(first, std::min(count, end * elements_per_unit) - first);
        });
    }

    std::shared_ptr<cpu_thread_pool> pool_;  // null: every kernel on the calling thread

public:
    cpu_backend() = default;
    explicit cpu_backend(int threads) { set_threads(threads); }

    // The threads this rank's kernels use (>= 1): the calling thread and threads - 1 of the pool.
    // Copies of the backend share the pool; kernels called on several threads at once take
    // turns on it.
    // The pool checks the count (any other than 1 makes one); a refused count leaves the old.
    void set_threads(int threads) {
        pool_ = threads == 1 ? nullptr : std::make_shared<cpu_thread_pool>(threads);
    }
    [[nodiscard]] int threads() const { return pool_ ? pool_->threads() : 1; }

    // The training state lives in host memory; kernels finish before they return, so there
    // is nothing to wait for; a matrix is host memory already, so the copies are plain ones.
    [[nodiscard]] const weft::state_memory& state_memory() const { return host_state_memory(); }
    void synchronize() const {}
    void copy_to_host(const matrix& m, std::span<Scalar> host) const {
        require_size(host.size(), std::size_t(m.size()), "copy_to_host: host.size()");
        std::copy_n(m.data(), m.size(), host.data());
    }
    void copy_from_host(std::span<const Scalar> host, matrix& m) const {
        require_size(host.size(), std::size_t(m.size()), "copy_from_host: host.size()");
        std::copy_n(host.data(), m.size(), m.data());
    }

    [[nodiscard]] int rows(const matrix& x) const { return static_cast<int>(x.rows()); }
    [[nodiscard]] int cols(const matrix& x) const { return static_cast<int>(x.cols()); }

    [[nodiscard]] matrix add(const matrix& a, const matrix& b) const {
        require_shape(b, a.rows(), a.cols(), "add: b");
        matrix sum(a.rows(), a.cols());
        in_element_parts(std::size_t(a.size()), [&](std::size_t first, std::size_t n) {
            flat(sum, first, n) = flat(a, first, n) + flat(b, first, n);
        });
        return sum;
    }

    // y = x W + b with W stored [in, out] so the flat buffer reads like the math.
    [[nodiscard]] matrix linear_forward(const matrix& x, std::span<const Scalar> w,
                                 std::span<const Scalar> b, int in, int out) const {
        require_shape(x, x.rows(), in, "linear_forward: x");
        require_size(w.size(), std::size_t(in) * std::size_t(out), "linear_forward: weight size");
        if (!b.empty()) require_size(b.size(), std::size_t(out), "linear_forward: bias size");
        matrix y(x.rows(), out);
        in_row_parts(x.rows(), [&](Eigen::Index first, Eigen::Index n) {
            auto part = y.middleRows(first, n);
            part.noalias() = x.middleRows(first, n) * const_map(w.data(), in, out);
            if (!b.empty()) part.rowwise() += const_row_map(b.data(), out);
        });
        return y;
    }

    // dX = dY W^T
    [[nodiscard]] matrix linear_backward_input(const matrix& dy, std::span<const Scalar> w, int in,
                                        int out) const {
        require_shape(dy, dy.rows(), out, "linear_backward_input: dy");
        require_size(w.size(), std::size_t(in) * std::size_t(out),
                     "linear_backward_input: weight size");
        matrix dx(dy.rows(), in);
        in_row_parts(dy.rows(), [&](Eigen::Index first, Eigen::Index n) {
            dx.middleRows(first, n).noalias() = dy.middleRows(first, n) * const_map(w.data(), in, out).transpose();
        });
        return dx;
    }

    // dW += X^T dY, db += column sums of dY
    void linear_backward_weight(const matrix& x, const matrix& dy, std::span<Scalar> dw,
                                       std::span<Scalar> db) const {
        require_shape(dy, x.rows(), dy.cols(), "linear_backward_weight: dy");
        const auto in = x.cols();
        const auto out = dy.cols();
        require_size(dw.size(), std::size_t(in * out), "linear_backward_weight: weight size");
        require_size(db.size(), std::size_t(out), "linear_backward_weight: bias size");
        // The micro-batch's gradient is formed apart and added in one rounding, so
        // grads end up the same whichever order micro-batches' W run in.
        // In parts of dW's rows (x's columns), each over every row of the micro-batch.
        matrix dw_batch(in, out);
        in_row_parts(in, [&](Eigen::Index first, Eigen::Index n) {
            dw_batch.middleRows(first, n).noalias() = x.middleCols(first, n).transpose() * dy;
        });
        const row_vector db_batch = dy.colwise().sum();
        Eigen::Map<matrix> dw_all(dw.data(), in, out);
        in_element_parts(std::size_t(dw_batch.size()), [&](std::size_t first, std::size_t n) {
            flat(dw_all, first, n) += flat(dw_batch, first, n);
        });
        row_map(db.data(), out) += db_batch;
    }

    // The fused kernels of exec::fused_kernels, as the two kernels they fuse (bit for bit).
    [[nodiscard]] matrix linear_gelu_forward(const matrix& x, std::span<const Scalar> w, std::span<const Scalar> b,
                                             int in, int out, matrix& pre_act) const {
        pre_act = linear_forward(x, w, b, in, out);
        return gelu_forward(pre_act);
    }
    [[nodiscard]] matrix linear_backward_input_gelu(const matrix& dy, std::span<const Scalar> w, int in, int out,
                                                    const matrix& pre_act) const {
        return gelu_backward(pre_act, linear_backward_input(dy, w, in, out));
    }
    [[nodiscard]] matrix residual_layer_norm_forward(const matrix& a, const matrix& b, std::span<const Scalar> gamma,
                                                     std::span<const Scalar> beta, Scalar eps, matrix& sum,
                                                     matrix& mean, matrix& rstd) const {
        sum = add(a, b);
        return layer_norm_forward(sum, gamma, beta, eps, mean, rstd);
    }

    // The vocabulary-parallel loss's kernels (exec::vocab_parallel_loss_kernels): the host's
    // passes (exec/softmax_rows.hpp) over the matrices in place.
    [[nodiscard]] std::vector<Scalar> row_max(const matrix& logits) const {
        require(logits.cols() >= 1, "row_max: logits.cols()", logits.cols(), "must be positive");
        std::vector<Scalar> max(std::size_t(logits.rows()));
        host::row_max<Scalar>(elements(logits), std::size_t(logits.cols()), max);
        return max;
    }
    [[nodiscard]] std::vector<Scalar> softmax_partial_sums(const matrix& logits, std::span<const Scalar> max,
                                                           std::span<const std::int32_t> labels,
                                                           int first_column) const {
        require_rows_of(logits, max.size(), labels.size(), "softmax_partial_sums");
        std::vector<Scalar> sums(2 * max.size());
        host::softmax_partial_sums<Scalar>(elements(logits), std::size_t(logits.cols()), max, labels, first_column,
                                           sums);
        return sums;
    }
    [[nodiscard]] matrix softmax_gradient(const matrix& logits, std::span<const Scalar> max,
                                          std::span<const Scalar> sums, std::span<const std::int32_t> labels,
                                          int first_column, Scalar row_scale) const {
        require_rows_of(logits, max.size(), labels.size(), "softmax_gradient");
        require_size(sums.size(), 2 * max.size(), "softmax_gradient: sums.size()");
        matrix d(logits.rows(), logits.cols());
        host::softmax_gradient<Scalar>(elements(logits), std::size_t(logits.cols()), max, sums, labels, first_column,
                                       row_scale, std::span<Scalar>(d.data(), std::size_t(d.size())));
        return d;
    }

    // The whole vocabulary-parallel loss (exec::vocab_parallel_loss_reduction_kernels): the
    // passes above and the host's reductions between them, which is all exec::cpu has.
    template <class Gather, class Sum>
    [[nodiscard]] deferred_value<Scalar> vocab_parallel_cross_entropy(const matrix& logits,
                                                                      std::span<const std::int32_t> labels,
                                                                      int first_column, Scalar row_scale,
                                                                      int group_size, Gather&& gather, Sum&& sum,
                                                                      matrix& dlogits) const {
        require(group_size >= 1, "vocab_parallel_cross_entropy: group_size", group_size, "must be positive");
        const auto n = std::size_t(logits.rows());
        const std::vector<Scalar> mine = row_max(logits);
        std::vector<Scalar> all(n * std::size_t(group_size));
        std::forward<Gather>(gather)(std::span<const Scalar>(mine), std::span<Scalar>(all));
        std::vector<Scalar> max(n);
        host::max_over_blocks<Scalar>(all, n, max);
        std::vector<Scalar> sums = softmax_partial_sums(logits, max, labels, first_column);
        std::forward<Sum>(sum)(std::span<Scalar>(sums));
        dlogits = softmax_gradient(logits, max, sums, labels, first_column, row_scale);
        return host::mean_loss_from_sums<Scalar>(sums, n);
    }

    // The optimizer kernels of exec::optimizer_kernels: the host's code, which they are.
    void scale(std::span<Scalar> values, Scalar factor) const { optim::scale_on_host<Scalar>(values, factor); }
    void adamw_update(std::span<Scalar> params, std::span<const Scalar> grads, std::span<Scalar> m,
                      std::span<Scalar> v, const optim::adamw_factors<Scalar>& f, bool decays) const {
        in_element_parts(params.size(), [&](std::size_t first, std::size_t n) {
            optim::adamw_update_on_host<Scalar>(params.subspan(first, n), grads.subspan(first, n),
                                                m.subspan(first, n), v.subspan(first, n), f, decays);
        });
    }
    void sgd_update(std::span<Scalar> params, std::span<const Scalar> grads, std::span<Scalar> momentum_buffer,
                    const optim::sgd_factors<Scalar>& f, bool decays) const {
        optim::sgd_update_on_host<Scalar>(params, grads, momentum_buffer, f, decays);
    }
    [[nodiscard]] optim::gradient_summary summarize_gradients(std::span<const Scalar> owned, std::size_t offset,
                                                              std::span<const optim::flat_run> counted) const {
        return optim::summarize_gradients_on_host<Scalar>(owned, offset, counted);
    }

    // GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(k (x + 0.044715 x^3)))
    // Eigen's array tanh is vectorized for float (a rational approximation within a few ulp
    // of std::tanh); a scalar std::tanh per element took a fifth of a small GPT step.
    [[nodiscard]] matrix gelu_forward(const matrix& x) const {
        matrix y(x.rows(), x.cols());
        in_element_parts(std::size_t(x.size()), [&](std::size_t first, std::size_t n) {
            const auto v = flat(x, first, n);
            flat(y, first, n) = Scalar(0.5) * v * (Scalar(1) + (gelu_k * (v + gelu_c * v * v * v)).tanh());
        });
        return y;
    }

    [[nodiscard]] matrix gelu_backward(const matrix& x, const matrix& dy) const {
        require_shape(dy, x.rows(), x.cols(), "gelu_backward: dy");
        matrix dx(x.rows(), x.cols());
        in_element_parts(std::size_t(x.size()), [&](std::size_t first, std::size_t n) {
            const auto v = flat(x, first, n);
            const array t = (gelu_k * (v + gelu_c * v * v * v)).tanh();  // once, used twice below
            const auto dt = (Scalar(1) - t * t) * gelu_k * (Scalar(1) + Scalar(3) * gelu_c * v * v);
            flat(dx, first, n) = flat(dy, first, n) * (Scalar(0.5) * (Scalar(1) + t) + Scalar(0.5) * v * dt);
        });
        return dx;
    }

    // Per-row layer norm. mean and rstd (rows x 1) are saved for both backward halves.
    [[nodiscard]] matrix layer_norm_forward(const matrix& x, std::span<const Scalar> gamma,
                                     std::span<const Scalar> beta, Scalar eps, matrix& mean,
                                     matrix& rstd) const {
        const auto n = x.cols();
        require_size(gamma.size(), std::size_t(n), "layer_norm_forward: weight size");
        require_size(beta.size(), std::size_t(n), "layer_norm_forward: bias size");
        require(n > 0, "layer_norm_forward: x.cols()", n, "must be positive");
        mean.resize(x.rows(), 1);
        rstd.resize(x.rows(), 1);
        matrix y(x.rows(), n);
        in_row_parts(x.rows(), [&](Eigen::Index first, Eigen::Index count) {
          for (Eigen::Index r = first; r < first + count; ++r) {
            const Scalar mu = x.row(r).sum() / Scalar(n);
            const Scalar var = (x.row(r).array() - mu).square().sum() / Scalar(n);
            const Scalar rs = Scalar(1) / std::sqrt(var + eps);
            mean(r, 0) = mu;
            rstd(r, 0) = rs;
            y.row(r) = ((x.row(r).array() - mu) * rs * const_row_map(gamma.data(), n).array() +
                        const_row_map(beta.data(), n).array())
                           .matrix();
          }
        });
        return y;
    }

    // dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma
    [[nodiscard]] matrix layer_norm_backward_input(const matrix& x, const matrix& mean,
                                            const matrix& rstd, std::span<const Scalar> gamma,
                                            const matrix& dy) const {
        const auto n = x.cols();
        require_shape(dy, x.rows(), n, "layer_norm_backward_input: dy");
        require_shape(mean, x.rows(), 1, "layer_norm_backward_input: mean");
        require_shape(rstd, x.rows(), 1, "layer_norm_backward_input: rstd");
        require_size(gamma.size(), std::size_t(n), "layer_norm_backward_input: weight size");
        matrix dx(x.rows(), n);
        in_row_parts(x.rows(), [&](Eigen::Index first, Eigen::Index count) {
          for (Eigen::Index r = first; r < first + count; ++r) {
            const row_vector xhat = ((x.row(r).array() - mean(r, 0)) * rstd(r, 0)).matrix();
            const row_vector g = (dy.row(r).array() * const_row_map(gamma.data(), n).array()).matrix();
            const Scalar mean_g = g.sum() / Scalar(n);
            const Scalar mean_gx = (g.array() * xhat.array()).sum() / Scalar(n);
            dx.row(r) = ((g.array() - mean_g - xhat.array() * mean_gx) * rstd(r, 0)).matrix();
          }
        });
        return dx;
    }

    // dgamma += sum_rows(dy * xhat), dbeta += sum_rows(dy)
    void layer_norm_backward_weight(const matrix& x, const matrix& mean, const matrix& rstd,
                                           const matrix& dy, std::span<Scalar> dgamma,
                                           std::span<Scalar> dbeta) const {
        const auto n = x.cols();
        require_shape(dy, x.rows(), n, "layer_norm_backward_weight: dy");
        require_shape(mean, x.rows(), 1, "layer_norm_backward_weight: mean");
        require_shape(rstd, x.rows(), 1, "layer_norm_backward_weight: rstd");
        require_size(dgamma.size(), std::size_t(n), "layer_norm_backward_weight: weight size");
        require_size(dbeta.size(), std::size_t(n), "layer_norm_backward_weight: bias size");
        // Summed apart, then added once: see linear_backward_weight. In parts of columns,
        // each over every row in order.
        in_element_parts(std::size_t(n), [&](std::size_t first_column, std::size_t count) {
            const auto c = Eigen::Index(first_column), w = Eigen::Index(count);
            row_vector dg = row_vector::Zero(w);
            row_vector db = row_vector::Zero(w);
            for (Eigen::Index r = 0; r < x.rows(); ++r) {
                dg.array() += dy.row(r).segment(c, w).array() * (x.row(r).segment(c, w).array() - mean(r, 0)) *
                              rstd(r, 0);
                db += dy.row(r).segment(c, w);
            }
            row_map(dgamma.data(), n).segment(c, w) += dg;
            row_map(dbeta.data(), n).segment(c, w) += db;
        });
    }

    // Mean softmax cross-entropy over rows; dlogits = scale * d(mean loss)/d(logits).
    // Returns the unscaled mean loss. Labels are class ids in [0, cols).
    [[nodiscard]] Scalar cross_entropy(const matrix& logits, std::span<const std::int32_t> labels,
                                Scalar scale, matrix& dlogits) const {
        const auto rows_n = logits.rows();
        const auto classes = logits.cols();
        require_size(labels.size(), std::size_t(rows_n), "cross_entropy: labels.size()");
        require(rows_n > 0, "cross_entropy: logits.rows()", rows_n, "must be positive");
        for (Eigen::Index r = 0; r < rows_n; ++r) {
            const std::int32_t label = labels[std::size_t(r)];
            if (label < 0 || label >= classes)
                throw invalid_argument("cross_entropy: labels[" + std::to_string(r) + "]", label,
                                       "must be a class id in [0, " + std::to_string(classes) +
                                           ")");
        }
        dlogits.resize(rows_n, classes);
        std::vector<double> row_loss(static_cast<std::size_t>(rows_n));  // summed in row order below, as one thread would
        const Scalar row_scale = scale / Scalar(rows_n);
        in_row_parts(rows_n, [&](Eigen::Index first, Eigen::Index count) {
            for (Eigen::Index r = first; r < first + count; ++r) {
                const std::int32_t label = labels[std::size_t(r)];
                const Scalar max = logits.row(r).maxCoeff();
                const row_vector e = (logits.row(r).array() - max).exp().matrix();
                const Scalar sum = e.sum();
                row_loss[std::size_t(r)] = double(std::log(sum) - (logits(r, label) - max));
                dlogits.row(r) = e * (row_scale / sum);
                dlogits(r, label) -= row_scale;
            }
        });
        double total = 0;
        for (const double loss : row_loss) total += loss;
        return Scalar(total / double(rows_n));
    }

    // ---- GPT kernels --------------------------------------------------------------

    // Row n = wte[tokens[n]] + wpe[n % seq_len]: tokens are whole sequences, row-major.
    [[nodiscard]] matrix embedding_forward(std::span<const std::int32_t> tokens, std::span<const Scalar> wte,
                                    std::span<const Scalar> wpe, int vocab, int width, int seq_len) const {
        require(seq_len >= 1 && tokens.size() % std::size_t(seq_len) == 0, "embedding_forward: tokens.size()",
                tokens.size(), "must be a positive multiple of seq_len = " + std::to_string(seq_len));
        require_size(wte.size(), std::size_t(vocab) * std::size_t(width), "embedding_forward: wte size");
        require_size(wpe.size(), std::size_t(seq_len) * std::size_t(width), "embedding_forward: wpe size");
        require_tokens(tokens, vocab, "embedding_forward");
        matrix y(Eigen::Index(tokens.size()), width);
        for (std::size_t n = 0; n < tokens.size(); ++n)
            y.row(Eigen::Index(n)) =
                const_row_map(wte.data() + std::size_t(tokens[n]) * std::size_t(width), width) +
                const_row_map(wpe.data() + (n % std::size_t(seq_len)) * std::size_t(width), width);
        return y;
    }

    // dwte[v] += sum of dy rows whose token is v, dwpe[t] += sum of dy rows at position t.
    // Each touched row is summed apart (in position order) and added once, so a tied
    // wte's two contributions meet in one rounding whichever is added first.
    void embedding_backward_weight(std::span<const std::int32_t> tokens, const matrix& dy,
                                          std::span<Scalar> dwte, std::span<Scalar> dwpe, int vocab,
                                          int seq_len) const {
        // The vocabulary's own checks; the rest are the row-range kernel's, which this is over
        // every row.
        require_size(dwte.size(), std::size_t(vocab) * std::size_t(dy.cols()), "embedding_backward_weight: wte size");
        require_tokens(tokens, vocab, "embedding_backward_weight");
        vocab_parallel_embedding_backward_weight(tokens, dy, dwte, 0, dwpe, seq_len);
    }

    // The vocabulary-parallel embedding (exec::vocab_parallel_embedding_kernels) over the wte
    // rows [first_row, first_row + wte_rows.size() / width) this rank holds. Forward: those
    // tokens' rows and zeros for the rest, summed over the group in place by `reduce`, then
    // wpe added by position: over the whole group, embedding_forward's values bit for bit
    // (x + 0 == x). Token ids are the caller's to check against the vocabulary; one outside
    // the held rows only gets zeros here.
    template <class Reduce>
    [[nodiscard]] matrix vocab_parallel_embedding_forward(std::span<const std::int32_t> tokens,
                                                          std::span<const Scalar> wte_rows, int first_row,
                                                          std::span<const Scalar> wpe, int width, int seq_len,
                                                          Reduce&& reduce) const {
        const std::int64_t held = held_embedding_rows(tokens, wte_rows.size(), first_row, width, seq_len,
                                                      "vocab_parallel_embedding_forward");
        require_size(wpe.size(), std::size_t(seq_len) * std::size_t(width),
                     "vocab_parallel_embedding_forward: wpe size");
        matrix y = matrix::Zero(Eigen::Index(tokens.size()), width);
        for (std::size_t n = 0; n < tokens.size(); ++n) {
            const std::int64_t row = std::int64_t(tokens[n]) - first_row;
            if (row >= 0 && row < held)
                y.row(Eigen::Index(n)) = const_row_map(wte_rows.data() + std::size_t(row) * std::size_t(width), width);
        }
        std::forward<Reduce>(reduce)(std::span<Scalar>(y.data(), std::size_t(y.size())));
        for (std::size_t n = 0; n < tokens.size(); ++n)
            y.row(Eigen::Index(n)) +=
                const_row_map(wpe.data() + (n % std::size_t(seq_len)) * std::size_t(width), width);
        return y;
    }
    // Backward: embedding_backward_weight restricted to the held rows of dwte (dwpe whole).
    // dy is replicated over the group, so each rank takes its rows with no communication.
    void vocab_parallel_embedding_backward_weight(std::span<const std::int32_t> tokens, const matrix& dy,
                                                  std::span<Scalar> dwte_rows, int first_row, std::span<Scalar> dwpe,
                                                  int seq_len) const {
        const auto width = dy.cols();
        require_shape(dy, Eigen::Index(tokens.size()), width, "embedding_backward_weight: dy");
        const std::int64_t held = held_embedding_rows(tokens, dwte_rows.size(), first_row, int(width), seq_len,
                                                      "embedding_backward_weight");
        require_size(dwpe.size(), std::size_t(seq_len) * std::size_t(width), "embedding_backward_weight: wpe size");
        std::vector<std::size_t> order;
        for (std::size_t n = 0; n < tokens.size(); ++n)
            if (std::int64_t(tokens[n]) - first_row >= 0 && std::int64_t(tokens[n]) - first_row < held)
                order.push_back(n);
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return tokens[a] < tokens[b]; });
        row_vector sum(width);
        for (std::size_t i = 0; i < order.size();) {
            const std::int32_t token = tokens[order[i]];
            sum = dy.row(Eigen::Index(order[i]));
            for (++i; i < order.size() && tokens[order[i]] == token; ++i) sum += dy.row(Eigen::Index(order[i]));
            row_map(dwte_rows.data() + std::size_t(token - first_row) * std::size_t(width), width) += sum;
        }
        const Eigen::Index t = seq_len;
        matrix dpos = dy.topRows(t);
        for (Eigen::Index first = t; first < dy.rows(); first += t) dpos += dy.middleRows(first, t);
        Eigen::Map<matrix>(dwpe.data(), t, width) += dpos;
    }

    // y = x W^T with W stored [out, in] (PyTorch's nn.Linear layout, no bias): the LM head
    // tied to the token embedding [vocab, width].
    [[nodiscard]] matrix transposed_linear_forward(const matrix& x, std::span<const Scalar> w, int out, int in) const {
        require_shape(x, x.rows(), in, "transposed_linear_forward: x");
        require_size(w.size(), std::size_t(out) * std::size_t(in), "transposed_linear_forward: weight size");
        matrix y(x.rows(), out);
        in_row_parts(x.rows(), [&](Eigen::Index first, Eigen::Index n) {
            y.middleRows(first, n).noalias() = x.middleRows(first, n) * const_map(w.data(), out, in).transpose();
        });
        return y;
    }

    // dX = dY W
    [[nodiscard]] matrix transposed_linear_backward_input(const matrix& dy, std::span<const Scalar> w, int out,
                                                   int in) const {
        require_shape(dy, dy.rows(), out, "transposed_linear_backward_input: dy");
        require_size(w.size(), std::size_t(out) * std::size_t(in),
                     "transposed_linear_backward_input: weight size");
        matrix dx(dy.rows(), in);
        in_row_parts(dy.rows(), [&](Eigen::Index first, Eigen::Index n) {
            dx.middleRows(first, n).noalias() = dy.middleRows(first, n) * const_map(w.data(), out, in);
        });
        return dx;
    }

    // dW += dY^T X, formed apart and added in one rounding (see linear_backward_weight).
    void transposed_linear_backward_weight(const matrix& x, const matrix& dy, std::span<Scalar> dw) const {
        require_shape(dy, x.rows(), dy.cols(), "transposed_linear_backward_weight: dy");
        require_size(dw.size(), std::size_t(dy.cols() * x.cols()), "transposed_linear_backward_weight: weight size");
        matrix dw_batch(dy.cols(), x.cols());
        in_row_parts(dy.cols(), [&](Eigen::Index first, Eigen::Index n) {
            dw_batch.middleRows(first, n).noalias() = dy.middleCols(first, n).transpose() * x;
        });
        Eigen::Map<matrix> dw_all(dw.data(), dy.cols(), x.cols());
        in_element_parts(std::size_t(dw_batch.size()), [&](std::size_t first, std::size_t n) {
            flat(dw_all, first, n) += flat(dw_batch, first, n);
        });
    }

    // Causal multi-head self-attention on qkv = [q | k | v] (rows = tokens of whole
    // sequences of seq_len, each of q, k, v `heads` blocks of width/heads columns).
    // Returns softmax(q k^T / sqrt(d) + causal mask) v per (sequence, head), heads
    // concatenated; saves the probabilities (seqs*heads*seq_len x seq_len, zero above
    // the diagonal) for backward.
    [[nodiscard]] matrix causal_attention_forward(const matrix& qkv, int seq_len, int heads, matrix& probs) const {
        const attention_shape a = attention_dims(qkv, seq_len, heads, "causal_attention_forward");
        matrix y(qkv.rows(), a.width);
        probs.resize(a.seqs * a.heads * a.t, a.t);
        const Scalar scale = Scalar(1) / std::sqrt(Scalar(a.d));
        // In parts of whole (sequence, head) pairs, which share nothing.
        in_parts(std::size_t(a.seqs * a.heads), 1, [&](std::size_t first_pair, std::size_t end_pair) {
            for (auto pair = Eigen::Index(first_pair); pair < Eigen::Index(end_pair); ++pair) {
                const Eigen::Index b = pair / a.heads, h = pair % a.heads;
                const auto q = qkv.block(b * a.t, h * a.d, a.t, a.d);
                const auto k = qkv.block(b * a.t, a.width + h * a.d, a.t, a.d);
                const auto v = qkv.block(b * a.t, 2 * a.width + h * a.d, a.t, a.d);
                auto p = probs.block((b * a.heads + h) * a.t, 0, a.t, a.t);
                // Only the causal (lower) triangle is needed: half the GEMM work for long sequences.
                p.template triangularView<Eigen::Lower>() = scale * (q * k.transpose());
                for (Eigen::Index i = 0; i < a.t; ++i) {
                    auto row = p.row(i);
                    const Scalar max = row.head(i + 1).maxCoeff();
                    row.head(i + 1) = (row.head(i + 1).array() - max).exp().matrix();
                    row.head(i + 1) /= row.head(i + 1).sum();
                    row.tail(a.t - i - 1).setZero();
                }
                y.block(b * a.t, h * a.d, a.t, a.d).noalias() = p.template triangularView<Eigen::Lower>() * v;
            }
        });
        return y;
    }

    // Gradient of causal_attention_forward with respect to qkv, from its probabilities.
    [[nodiscard]] matrix causal_attention_backward(const matrix& qkv, const matrix& probs, const matrix& dy,
                                            int seq_len, int heads) const {
        const attention_shape a = attention_dims(qkv, seq_len, heads, "causal_attention_backward");
        require_shape(probs, a.seqs * a.heads * a.t, a.t, "causal_attention_backward: probs");
        require_shape(dy, qkv.rows(), a.width, "causal_attention_backward: dy");
        matrix dqkv(qkv.rows(), qkv.cols());
        const Scalar scale = Scalar(1) / std::sqrt(Scalar(a.d));
        in_parts(std::size_t(a.seqs * a.heads), 1, [&](std::size_t first_pair, std::size_t end_pair) {
            matrix ds(a.t, a.t);  // each part's own
            for (auto pair = Eigen::Index(first_pair); pair < Eigen::Index(end_pair); ++pair) {
                const Eigen::Index b = pair / a.heads, h = pair % a.heads;
                const auto q = qkv.block(b * a.t, h * a.d, a.t, a.d);
                const auto k = qkv.block(b * a.t, a.width + h * a.d, a.t, a.d);
                const auto v = qkv.block(b * a.t, 2 * a.width + h * a.d, a.t, a.d);
                const auto p = probs.block((b * a.heads + h) * a.t, 0, a.t, a.t);
                const auto g = dy.block(b * a.t, h * a.d, a.t, a.d);
                dqkv.block(b * a.t, 2 * a.width + h * a.d, a.t, a.d).noalias() =
                    p.transpose().template triangularView<Eigen::Upper>() * g;
                ds.template triangularView<Eigen::Lower>() = g * v.transpose();  // d(probs)
                // Softmax backward per row, over the unmasked prefix only.
                for (Eigen::Index i = 0; i < a.t; ++i) {
                    auto row = ds.row(i);
                    const auto prow = p.row(i).head(i + 1);
                    const Scalar dot = prow.dot(row.head(i + 1));
                    row.head(i + 1) = (prow.array() * (row.head(i + 1).array() - dot)).matrix() * scale;
                    row.tail(a.t - i - 1).setZero();
                }
                dqkv.block(b * a.t, h * a.d, a.t, a.d).noalias() = ds.template triangularView<Eigen::Lower>() * k;
                dqkv.block(b * a.t, a.width + h * a.d, a.t, a.d).noalias() =
                    ds.transpose().template triangularView<Eigen::Upper>() * q;
            }
        });
        return dqkv;
    }

private:
    static constexpr Scalar gelu_k = Scalar(0.7978845608028654);  // sqrt(2 / pi)
    static constexpr Scalar gelu_c = Scalar(0.044715);

    // How many wte rows a vocabulary-parallel embedding kernel holds (its wte slice's size over
    // width), after the checks of the arguments it shares with the whole-vocabulary kernels.
    static std::int64_t held_embedding_rows(std::span<const std::int32_t> tokens, std::size_t wte_size, int first_row,
                                            int width, int seq_len, std::string_view kernel) {
        const std::string name(kernel);
        require(seq_len >= 1 && tokens.size() % std::size_t(seq_len) == 0, name + ": tokens.size()", tokens.size(),
                "must be a positive multiple of seq_len = " + std::to_string(seq_len));
        require(width >= 1, name + ": width", width, "must be positive");
        require(first_row >= 0, name + ": first_row", first_row, "must be a vocabulary row (>= 0)");
        require(wte_size % std::size_t(width) == 0, name + ": wte size", wte_size,
                "must be a whole number of rows of width " + std::to_string(width));
        return std::int64_t(wte_size / std::size_t(width));
    }

    static void require_tokens(std::span<const std::int32_t> tokens, int vocab, std::string_view kernel) {
        for (std::size_t n = 0; n < tokens.size(); ++n)
            if (tokens[n] < 0 || tokens[n] >= vocab)
                throw invalid_argument(std::string(kernel) + ": tokens[" + std::to_string(n) + "]", tokens[n],
                                       "must be a token id in [0, vocab_size = " + std::to_string(vocab) + ")");
    }

    struct attention_shape {
        Eigen::Index seqs, t, heads, width, d;
    };
    static attention_shape attention_dims(const matrix& qkv, int seq_len, int heads, std::string_view kernel) {
        const std::string k(kernel);
        require(seq_len >= 1, k + ": seq_len", seq_len, "must be at least 1");
        require(heads >= 1, k + ": heads", heads, "must be at least 1");
        require(qkv.cols() > 0 && qkv.cols() % (3 * Eigen::Index(heads)) == 0, k + ": qkv.cols()", qkv.cols(),
                "must be 3 * width with width a positive multiple of heads = " + std::to_string(heads));
        require(qkv.rows() % seq_len == 0, k + ": qkv.rows()", qkv.rows(),
                "must be a multiple of seq_len = " + std::to_string(seq_len) + " (whole sequences)");
        const Eigen::Index width = qkv.cols() / 3;
        return {qkv.rows() / seq_len, seq_len, heads, width, width / heads};
    }
};

using cpu = cpu_backend<float>;

static_assert(compute_backend<cpu>);
static_assert(compute_backend<cpu_backend<double>>);
static_assert(fused_kernels<cpu> && optimizer_kernels<cpu> && optimizer_kernels<cpu_backend<double>>);
static_assert(vocab_parallel_loss_kernels<cpu> && vocab_parallel_loss_kernels<cpu_backend<double>>);

}  // namespace weft::exec
