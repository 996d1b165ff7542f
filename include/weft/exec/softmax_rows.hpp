// The three passes of a softmax cross-entropy over logits whose columns are one slice of the
// vocabulary (the vocabulary-parallel loss, nn/vocab_parallel_cross_entropy.hpp), on the host,
// over row-major spans. Between the passes only per-row scalars cross the tensor-parallel
// group: the row maxima, then the sums. exec::cpu's loss kernels are these functions over its
// matrices; a backend without such kernels runs them over host copies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace weft::exec::host {

// max[r] = the largest of row r's cols values.
template <class Scalar>
void row_max(std::span<const Scalar> logits, std::size_t cols, std::span<Scalar> max) {
    for (std::size_t r = 0; r < max.size(); ++r)
        max[r] = *std::max_element(logits.begin() + std::ptrdiff_t(r * cols),
                                   logits.begin() + std::ptrdiff_t((r + 1) * cols));
}

// sums[r] = sum over row r of exp(logit - max[r]), in column order; sums[n + r] = the
// shifted logit of row r's label when this slice's columns [first_column, first_column +
// cols) hold it, else 0. sums has 2n elements for n rows.
template <class Scalar>
void softmax_partial_sums(std::span<const Scalar> logits, std::size_t cols, std::span<const Scalar> max,
                          std::span<const std::int32_t> labels, int first_column, std::span<Scalar> sums) {
    const std::size_t n = max.size();
    for (std::size_t r = 0; r < n; ++r) {
        Scalar sum = 0;
        for (std::size_t j = 0; j < cols; ++j) sum += std::exp(logits[r * cols + j] - max[r]);
        sums[r] = sum;
        const std::int64_t column = std::int64_t(labels[r]) - first_column;
        sums[n + r] = column >= 0 && column < std::int64_t(cols) ? logits[r * cols + std::size_t(column)] - max[r]
                                                                  : Scalar(0);
    }
}

// d[r, j] = exp(logit - max[r]) * (row_scale / sums[r]), less row_scale at row r's label
// when this slice holds it: row_scale times the softmax minus the one-hot, this slice's part.
template <class Scalar>
void softmax_gradient(std::span<const Scalar> logits, std::size_t cols, std::span<const Scalar> max,
                      std::span<const Scalar> sums, std::span<const std::int32_t> labels, int first_column,
                      Scalar row_scale, std::span<Scalar> d) {
    for (std::size_t r = 0; r < max.size(); ++r) {
        const Scalar factor = row_scale / sums[r];
        for (std::size_t j = 0; j < cols; ++j) d[r * cols + j] = std::exp(logits[r * cols + j] - max[r]) * factor;
        const std::int64_t column = std::int64_t(labels[r]) - first_column;
        if (column >= 0 && column < std::int64_t(cols)) d[r * cols + std::size_t(column)] -= row_scale;
    }
}

// max[r] = the largest of all[q * n + r] over the group's blocks q = 0, 1, ... in that
// order (the all-gathered row maxima), so every rank shifts by the same value.
template <class Scalar>
void max_over_blocks(std::span<const Scalar> all, std::size_t n, std::span<Scalar> max) {
    const std::size_t blocks = n == 0 ? 0 : all.size() / n;
    for (std::size_t r = 0; r < n; ++r) {
        max[r] = all[r];
        for (std::size_t q = 1; q < blocks; ++q) max[r] = std::max(max[r], all[q * n + r]);
    }
}

// The mean over n rows of log(sums[r]) - sums[n + r] (the group's summed sums): the loss,
// accumulated in double in row order.
template <class Scalar>
[[nodiscard]] Scalar mean_loss_from_sums(std::span<const Scalar> sums, std::size_t n) {
    double total = 0;
    for (std::size_t r = 0; r < n; ++r) total += double(std::log(sums[r]) - sums[n + r]);
    return Scalar(total / double(n));
}

}  // namespace weft::exec::host
