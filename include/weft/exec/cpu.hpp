// The CPU compute backend: Eigen row-major matrices (rows = samples) and the
// kernels nn/ layers call. float for training, double for gradient checks.
// Every kernel is single-threaded and runs in a fixed order, so results are bit-reproducible.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <Eigen/Dense>

#include "weft/core/error.hpp"
#include "weft/exec/compute_backend.hpp"

namespace weft::exec {

template <class Scalar>
struct cpu_backend {
    static constexpr std::string_view name = "cpu";
    using scalar = Scalar;
    using matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

private:
    using const_map = Eigen::Map<const matrix>;
    using row_vector = Eigen::Matrix<Scalar, 1, Eigen::Dynamic>;
    using const_row_map = Eigen::Map<const row_vector>;
    using row_map = Eigen::Map<row_vector>;

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

public:
    static int rows(const matrix& x) { return static_cast<int>(x.rows()); }
    static int cols(const matrix& x) { return static_cast<int>(x.cols()); }

    static matrix add(const matrix& a, const matrix& b) {
        require_shape(b, a.rows(), a.cols(), "add: b");
        return a + b;
    }

    // y = x W + b with W stored [in, out] so the flat buffer reads like the math.
    static matrix linear_forward(const matrix& x, std::span<const Scalar> w,
                                 std::span<const Scalar> b, int in, int out) {
        require_shape(x, x.rows(), in, "linear_forward: x");
        require_size(w.size(), std::size_t(in) * std::size_t(out), "linear_forward: weight size");
        require_size(b.size(), std::size_t(out), "linear_forward: bias size");
        matrix y = x * const_map(w.data(), in, out);
        y.rowwise() += const_row_map(b.data(), out);
        return y;
    }

    // dX = dY W^T
    static matrix linear_backward_input(const matrix& dy, std::span<const Scalar> w, int in,
                                        int out) {
        require_shape(dy, dy.rows(), out, "linear_backward_input: dy");
        require_size(w.size(), std::size_t(in) * std::size_t(out),
                     "linear_backward_input: weight size");
        return dy * const_map(w.data(), in, out).transpose();
    }

    // dW += X^T dY, db += column sums of dY
    static void linear_backward_weight(const matrix& x, const matrix& dy, std::span<Scalar> dw,
                                       std::span<Scalar> db) {
        require_shape(dy, x.rows(), dy.cols(), "linear_backward_weight: dy");
        const auto in = x.cols();
        const auto out = dy.cols();
        require_size(dw.size(), std::size_t(in * out), "linear_backward_weight: weight size");
        require_size(db.size(), std::size_t(out), "linear_backward_weight: bias size");
        // The micro-batch's gradient is formed apart and added in one rounding, so
        // grads end up the same whichever order micro-batches' W run in.
        const matrix dw_batch = x.transpose() * dy;
        const row_vector db_batch = dy.colwise().sum();
        Eigen::Map<matrix>(dw.data(), in, out) += dw_batch;
        row_map(db.data(), out) += db_batch;
    }

    // GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(k (x + 0.044715 x^3)))
    static matrix gelu_forward(const matrix& x) {
        return x.unaryExpr([](Scalar v) {
            return Scalar(0.5) * v * (Scalar(1) + std::tanh(gelu_k * (v + gelu_c * v * v * v)));
        });
    }

    static matrix gelu_backward(const matrix& x, const matrix& dy) {
        require_shape(dy, x.rows(), x.cols(), "gelu_backward: dy");
        return x.binaryExpr(dy, [](Scalar v, Scalar g) {
            const Scalar t = std::tanh(gelu_k * (v + gelu_c * v * v * v));
            const Scalar dt = (Scalar(1) - t * t) * gelu_k * (Scalar(1) + Scalar(3) * gelu_c * v * v);
            return g * (Scalar(0.5) * (Scalar(1) + t) + Scalar(0.5) * v * dt);
        });
    }

    // Per-row layer norm. mean and rstd (rows x 1) are saved for both backward halves.
    static matrix layer_norm_forward(const matrix& x, std::span<const Scalar> gamma,
                                     std::span<const Scalar> beta, Scalar eps, matrix& mean,
                                     matrix& rstd) {
        const auto n = x.cols();
        require_size(gamma.size(), std::size_t(n), "layer_norm_forward: weight size");
        require_size(beta.size(), std::size_t(n), "layer_norm_forward: bias size");
        require(n > 0, "layer_norm_forward: x.cols()", n, "must be positive");
        mean.resize(x.rows(), 1);
        rstd.resize(x.rows(), 1);
        matrix y(x.rows(), n);
        for (Eigen::Index r = 0; r < x.rows(); ++r) {
            const Scalar mu = x.row(r).sum() / Scalar(n);
            const Scalar var = (x.row(r).array() - mu).square().sum() / Scalar(n);
            const Scalar rs = Scalar(1) / std::sqrt(var + eps);
            mean(r, 0) = mu;
            rstd(r, 0) = rs;
            y.row(r) = ((x.row(r).array() - mu) * rs * const_row_map(gamma.data(), n).array() +
                        const_row_map(beta.data(), n).array())
                           .matrix();
        }
        return y;
    }

    // dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma
    static matrix layer_norm_backward_input(const matrix& x, const matrix& mean,
                                            const matrix& rstd, std::span<const Scalar> gamma,
                                            const matrix& dy) {
        const auto n = x.cols();
        require_shape(dy, x.rows(), n, "layer_norm_backward_input: dy");
        require_shape(mean, x.rows(), 1, "layer_norm_backward_input: mean");
        require_shape(rstd, x.rows(), 1, "layer_norm_backward_input: rstd");
        require_size(gamma.size(), std::size_t(n), "layer_norm_backward_input: weight size");
        matrix dx(x.rows(), n);
        for (Eigen::Index r = 0; r < x.rows(); ++r) {
            const row_vector xhat = ((x.row(r).array() - mean(r, 0)) * rstd(r, 0)).matrix();
            const row_vector g = (dy.row(r).array() * const_row_map(gamma.data(), n).array()).matrix();
            const Scalar mean_g = g.sum() / Scalar(n);
            const Scalar mean_gx = (g.array() * xhat.array()).sum() / Scalar(n);
            dx.row(r) = ((g.array() - mean_g - xhat.array() * mean_gx) * rstd(r, 0)).matrix();
        }
        return dx;
    }

    // dgamma += sum_rows(dy * xhat), dbeta += sum_rows(dy)
    static void layer_norm_backward_weight(const matrix& x, const matrix& mean, const matrix& rstd,
                                           const matrix& dy, std::span<Scalar> dgamma,
                                           std::span<Scalar> dbeta) {
        const auto n = x.cols();
        require_shape(dy, x.rows(), n, "layer_norm_backward_weight: dy");
        require_shape(mean, x.rows(), 1, "layer_norm_backward_weight: mean");
        require_shape(rstd, x.rows(), 1, "layer_norm_backward_weight: rstd");
        require_size(dgamma.size(), std::size_t(n), "layer_norm_backward_weight: weight size");
        require_size(dbeta.size(), std::size_t(n), "layer_norm_backward_weight: bias size");
        // Summed apart, then added once: see linear_backward_weight.
        row_vector dg = row_vector::Zero(n);
        row_vector db = row_vector::Zero(n);
        for (Eigen::Index r = 0; r < x.rows(); ++r) {
            dg.array() += dy.row(r).array() * (x.row(r).array() - mean(r, 0)) * rstd(r, 0);
            db += dy.row(r);
        }
        row_map(dgamma.data(), n) += dg;
        row_map(dbeta.data(), n) += db;
    }

    // Mean softmax cross-entropy over rows; dlogits = scale * d(mean loss)/d(logits).
    // Returns the unscaled mean loss. Labels are class ids in [0, cols).
    static Scalar cross_entropy(const matrix& logits, std::span<const std::int32_t> labels,
                                Scalar scale, matrix& dlogits) {
        const auto rows_n = logits.rows();
        const auto classes = logits.cols();
        require_size(labels.size(), std::size_t(rows_n), "cross_entropy: labels.size()");
        require(rows_n > 0, "cross_entropy: logits.rows()", rows_n, "must be positive");
        dlogits.resize(rows_n, classes);
        double total = 0;
        const Scalar row_scale = scale / Scalar(rows_n);
        for (Eigen::Index r = 0; r < rows_n; ++r) {
            const std::int32_t label = labels[std::size_t(r)];
            if (label < 0 || label >= classes)
                throw invalid_argument("cross_entropy: labels[" + std::to_string(r) + "]", label,
                                       "must be a class id in [0, " + std::to_string(classes) +
                                           ")");
            const Scalar max = logits.row(r).maxCoeff();
            const row_vector e = (logits.row(r).array() - max).exp().matrix();
            const Scalar sum = e.sum();
            total += double(std::log(sum) - (logits(r, label) - max));
            dlogits.row(r) = e * (row_scale / sum);
            dlogits(r, label) -= row_scale;
        }
        return Scalar(total / double(rows_n));
    }

private:
    static constexpr Scalar gelu_k = Scalar(0.7978845608028654);  // sqrt(2 / pi)
    static constexpr Scalar gelu_c = Scalar(0.044715);
};

using cpu = cpu_backend<float>;

static_assert(compute_backend<cpu>);
static_assert(compute_backend<cpu_backend<double>>);

}  // namespace weft::exec
