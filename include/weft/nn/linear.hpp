// A fully connected layer y = x W + b with split backward: backward_input (dX) and
// backward_weight (dW, db) run separately, as zero-bubble schedules need.
// The layer owns no storage: it knows where its tensors sit in a stage's flat buffers.
// Under tensor parallelism it is column-parallel (W split by output columns) or
// row-parallel (W split by input rows), Megatron's pair, and does the reductions they need.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/parameter_registry.hpp"
#include "weft/core/rng.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/tensor_parallel.hpp"

namespace weft::nn {

// How a linear layer is split over a tp group.
enum class linear_parallel {
    none,    // W and b whole on every rank
    column,  // W [in, out] split along out (in `parts` blocks, e.g. q|k|v), b split alike; the
             // input is replicated, the output is this rank's columns; backward_input all-reduces dX
    row,     // W split along in, b whole; the input is this rank's columns, forward all-reduces
             // the partial products and then adds b once
};

template <compute_backend Backend>
class linear {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    linear() = default;
    // Registers `<prefix>.weight` [in, out] and `<prefix>.bias` [out] (global shapes).
    linear(parameter_registry& registry, const std::string& prefix, int in, int out)
        : linear(registry, prefix, in, out, linear_parallel::none, {}) {}

    // The same tensors, this rank's part of them as `mode` says; `parts` equal blocks of
    // the output columns are split separately (column mode only).
    linear(parameter_registry& registry, const std::string& prefix, int in, int out, linear_parallel mode,
           tp_group<scalar> tp, int parts = 1)
        : in_(in), out_(out), weight_name_(prefix + ".weight"), bias_name_(prefix + ".bias") {
        if (tp.size == 1) mode = linear_parallel::none;
        mode_ = mode;
        tensor_split weight_split, bias_split;
        if (mode == linear_parallel::column) {
            weight_split = {1, parts, tp.rank, tp.size};
            bias_split = {0, parts, tp.rank, tp.size};
        } else if (mode == linear_parallel::row) {
            weight_split = {0, 1, tp.rank, tp.size};
        }
        weight_offset_ = registry.add(weight_name_, {in, out}, weight_split);
        bias_offset_ = registry.add(bias_name_, {out}, bias_split);
        weight_info_ = registry.find(weight_name_);
        const std::vector<int> local = weight_info_.local_shape();
        in_ = local[0];
        out_ = local[1];
        if (mode != linear_parallel::none) tp_ = std::move(tp);
    }

    // This rank's input and output widths (the global ones without tensor parallelism).
    [[nodiscard]] int in_features() const { return in_; }
    [[nodiscard]] int out_features() const { return out_; }

    // Weights ~ N(0, 1/in) keyed by (seed, global name, global element index); bias 0.
    void initialize(std::span<scalar> params, std::uint64_t seed) const {
        const double std_dev = 1.0 / std::sqrt(double(weight_info_.shape[0]));
        auto w = weight(params);
        weight_info_.for_each_run([&](std::size_t local, std::size_t global, std::size_t length) {
            for (std::size_t j = 0; j < length; ++j)
                w[local + j] = scalar(double(rng::normal(seed, weight_name_, global + j)) * std_dev);
        });
        for (auto& b : bias(params)) b = scalar(0);
    }

    [[nodiscard]] matrix forward(Backend& backend, std::span<const scalar> params, const matrix& x) const {
        if (mode_ != linear_parallel::row) return backend.linear_forward(x, weight(params), bias(params), in_, out_);
        // Partial products of this rank's input columns, summed over the group, then the
        // (replicated) bias once: adding it on every rank before the sum would count it tp times.
        matrix y = backend.linear_forward(x, weight(params), std::span<const scalar>(), in_, out_);
        allreduce_sum(backend, tp_, y, bias(params));
        return y;
    }
    // gelu(x W + b), keeping x W + b in pre_act (what GELU's backward reads): one GEMM where the
    // backend fuses the two (exec::fused_kernels). A row-parallel layer sums its output over
    // the group before the bias, so it applies GELU after forward().
    [[nodiscard]] matrix forward_gelu(Backend& backend, std::span<const scalar> params, const matrix& x,
                                      matrix& pre_act) const {
        if constexpr (exec::fused_kernels<Backend>) {
            if (mode_ != linear_parallel::row)
                return backend.linear_gelu_forward(x, weight(params), bias(params), in_, out_, pre_act);
        }
        pre_act = forward(backend, params, x);
        return backend.gelu_forward(pre_act);
    }
    // The input gradient through a GELU before this layer (its input was gelu(pre_act)): one
    // GEMM where the backend fuses the two (exec::fused_kernels). A column-parallel layer
    // sums its input gradient over the group first, so it applies GELU's after backward_input().
    [[nodiscard]] matrix backward_input_gelu(Backend& backend, std::span<const scalar> params, const matrix& dy,
                                             const matrix& pre_act) const {
        if constexpr (exec::fused_kernels<Backend>) {
            if (mode_ != linear_parallel::column)
                return backend.linear_backward_input_gelu(dy, weight(params), in_, out_, pre_act);
        }
        return backend.gelu_backward(pre_act, backward_input(backend, params, dy));
    }
    [[nodiscard]] matrix backward_input(Backend& backend, std::span<const scalar> params, const matrix& dy) const {
        matrix dx = backend.linear_backward_input(dy, weight(params), in_, out_);
        // Column-parallel: each rank's dX is the part through its own output columns; the
        // input was replicated, so its gradient is the sum (Megatron's "f" backward).
        if (mode_ == linear_parallel::column) allreduce_sum(backend, tp_, dx);
        return dx;
    }
    // Accumulates into the gradient buffer (same layout as the parameters). A row-parallel
    // bias's gradient is the column sum of the replicated dY: the same on every rank.
    void backward_weight(Backend& backend, std::span<scalar> grads, const matrix& x, const matrix& dy) const {
        backend.linear_backward_weight(x, dy, weight(grads), bias(grads));
    }

private:
    template <class T>
    std::span<T> weight(std::span<T> buffer) const {
        return buffer.subspan(weight_offset_, std::size_t(in_) * std::size_t(out_));
    }
    template <class T>
    std::span<T> bias(std::span<T> buffer) const {
        return buffer.subspan(bias_offset_, std::size_t(out_));
    }

    int in_ = 0;   // local
    int out_ = 0;  // local
    std::string weight_name_;
    std::string bias_name_;
    std::size_t weight_offset_ = 0;
    std::size_t bias_offset_ = 0;
    parameter_info weight_info_;  // global shape and split, for initialize
    linear_parallel mode_ = linear_parallel::none;
    tp_group<scalar> tp_;           // only set when split
};

}  // namespace weft::nn
