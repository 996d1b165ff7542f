// Mean softmax cross-entropy when the logits' vocabulary columns are split over a tensor-
// parallel group (the LM head under tensor parallelism): each rank holds [rows, V_local],
// and no rank ever gathers the full [rows, V] logits. Only per-row scalars cross the group:
// the row maxima (all-gathered), then the sums of exponentials and the target logits (one
// all-reduce). Same scale semantics as nn::cross_entropy. Three paths, the same arithmetic:
// the backend's whole loss (exec::vocab_parallel_loss_reduction_kernels) where the group
// moves its memory; else its three passes (exec::vocab_parallel_loss_kernels) with the
// per-row scalars on the host; else the passes on a host copy of the logits.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/exec/softmax_rows.hpp"
#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/tensor_parallel.hpp"

namespace weft::nn {

// logits: this rank's columns [vocab_rows.first, vocab_rows.last) of the [rows, vocab_size]
// logits. labels[r] is the global class id of row r, in [0, vocab_size). Returns the mean
// loss over rows, the same on every rank of `tp` (bit for bit), and scale * d(loss)/d(its
// logits), this rank's columns only. Every rank of the group must call it with the same
// rows and labels (two collectives).
template <compute_backend Backend>
[[nodiscard]] cross_entropy_result<Backend> vocab_parallel_cross_entropy(Backend& backend,
                                                                         const typename Backend::matrix& logits,
                                                                         std::span<const std::int32_t> labels,
                                                                         index_range vocab_rows, int vocab_size,
                                                                         const tp_group<typename Backend::scalar>& tp,
                                                                         typename Backend::scalar scale = 1) {
    using scalar = typename Backend::scalar;
    require(std::isfinite(double(scale)), "vocab_parallel_cross_entropy: scale", scale, "must be finite");
    const int rows = backend.rows(logits);
    const int cols = backend.cols(logits);
    require(rows >= 1, "vocab_parallel_cross_entropy: logits.rows()", rows, "must be positive");
    require(labels.size() == std::size_t(rows), "vocab_parallel_cross_entropy: labels.size()", labels.size(),
            "must equal logits.rows() = " + std::to_string(rows));
    require(vocab_rows.first >= 0 && vocab_rows.size() == cols && vocab_rows.last <= vocab_size,
            "vocab_parallel_cross_entropy: vocab_rows",
            "[" + std::to_string(vocab_rows.first) + ", " + std::to_string(vocab_rows.last) + ")",
            "must be logits.cols() = " + std::to_string(cols) +
                " columns within [0, vocab_size = " + std::to_string(vocab_size) + ")");
    for (std::size_t r = 0; r < labels.size(); ++r)
        if (labels[r] < 0 || labels[r] >= vocab_size)
            throw invalid_argument("vocab_parallel_cross_entropy: labels[" + std::to_string(r) + "]", labels[r],
                                   "must be a class id in [0, vocab_size = " + std::to_string(vocab_size) + ")");

    const auto n = std::size_t(rows);
    const auto c = std::size_t(cols);
    const scalar row_scale = scale / scalar(rows);
    // The global row maximum, for a stable softmax: every rank's maxima, then the max of them
    // (taken in the same order everywhere, so every rank shifts by the same value).
    const auto global_max = [&](const std::vector<scalar>& local_max) {
        std::vector<scalar> all_max(n * std::size_t(tp.size));
        tp.allgather(local_max, all_max);
        std::vector<scalar> max(n);
        exec::host::max_over_blocks<scalar>(all_max, n, max);
        return max;
    };
    // sums: [0, n) this rank's sums of exp(logit - max), [n, 2n) the label's shifted logit on
    // the one rank that holds it; summed over the group, they give every row's loss.
    const auto mean_loss = [&](std::vector<scalar>& sums) {
        tp.allreduce_sum(sums);
        return exec::host::mean_loss_from_sums<scalar>(sums, n);
    };
    cross_entropy_result<Backend> result{};
    if constexpr (exec::vocab_parallel_loss_reduction_kernels<Backend>) {
        // The whole loss in the backend's memory, its two reductions over the group there
        // too, the loss read when the engine reads it: where the group's communicator moves
        // that memory (exec::cpu: host memory, any group; exec::cuda: over comm::nccl).
        if (std::same_as<typename Backend::memory_space, host_space> || tp.moves_device_memory) {
            result.loss = backend.vocab_parallel_cross_entropy(
                logits, labels, vocab_rows.first, row_scale, tp.size,
                [&tp](std::span<const scalar> mine, std::span<scalar> all) { tp.allgather(mine, all); },
                [&tp](std::span<scalar> values) { tp.allreduce_sum(values); }, result.dlogits);
            return result;
        }
    }
    if constexpr (exec::vocab_parallel_loss_kernels<Backend>) {
        // The backend's passes: the logits stay where they are (exec::cuda: on the GPU).
        const std::vector<scalar> max = global_max(backend.row_max(logits));
        std::vector<scalar> sums = backend.softmax_partial_sums(logits, max, labels, vocab_rows.first);
        result.loss = mean_loss(sums);
        result.dlogits = backend.softmax_gradient(logits, max, sums, labels, vocab_rows.first, row_scale);
    } else {
        // The same passes on the host, over a host copy of the logits (nn/tensor_parallel.hpp).
        read_on_host(backend, logits, [&](std::span<const scalar> x) {
            std::vector<scalar> local_max(n);
            exec::host::row_max<scalar>(x, c, local_max);
            const std::vector<scalar> max = global_max(local_max);
            std::vector<scalar> sums(2 * n);
            exec::host::softmax_partial_sums<scalar>(x, c, max, labels, vocab_rows.first, sums);
            result.loss = mean_loss(sums);
            result.dlogits = make_on_host(backend, rows, cols, [&](std::span<scalar> d) {
                exec::host::softmax_gradient<scalar>(x, c, max, sums, labels, vocab_rows.first, row_scale, d);
            });
        });
    }
    return result;
}

}  // namespace weft::nn
