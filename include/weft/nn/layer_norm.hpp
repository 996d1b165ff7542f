// Layer normalization over the feature dimension with split backward. Forward saves
// each row's mean and reciprocal std so both backward halves avoid recomputing them.
// The layer owns no storage: it knows where its tensors sit in a stage's flat buffers.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"

namespace weft::nn {

template <compute_backend Backend>
class layer_norm {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    static constexpr double eps = 1e-5;  // PyTorch's default

    layer_norm() = default;
    // Registers `<prefix>.weight` [width] and `<prefix>.bias` [width].
    layer_norm(parameter_registry& registry, const std::string& prefix, int width) : width_(width) {
        weight_offset_ = registry.add(prefix + ".weight", {width});
        bias_offset_ = registry.add(prefix + ".bias", {width});
    }

    [[nodiscard]] int width() const { return width_; }

    // weight 1, bias 0: starts as a pure normalization.
    void initialize(std::span<scalar> params) const {
        for (auto& w : weight(params)) w = scalar(1);
        for (auto& b : bias(params)) b = scalar(0);
    }

    [[nodiscard]] matrix forward(Backend& backend, std::span<const scalar> params, const matrix& x, matrix& mean,
                                 matrix& rstd) const {
        return backend.layer_norm_forward(x, weight(params), bias(params), scalar(eps), mean, rstd);
    }
    // LayerNorm of sum = a + b (a residual connection), keeping the sum: one kernel where the
    // backend fuses the two (exec::fused_kernels).
    [[nodiscard]] matrix forward_residual(Backend& backend, std::span<const scalar> params, const matrix& a,
                                          const matrix& b, matrix& sum, matrix& mean, matrix& rstd) const {
        if constexpr (exec::fused_kernels<Backend>) {
            return backend.residual_layer_norm_forward(a, b, weight(params), bias(params), scalar(eps), sum, mean,
                                                       rstd);
        } else {
            sum = backend.add(a, b);
            return forward(backend, params, sum, mean, rstd);
        }
    }
    [[nodiscard]] matrix backward_input(Backend& backend, std::span<const scalar> params, const matrix& x,
                                        const matrix& mean, const matrix& rstd,
                                        const matrix& dy) const {
        return backend.layer_norm_backward_input(x, mean, rstd, weight(params), dy);
    }
    // Accumulates into the gradient buffer (same layout as the parameters).
    void backward_weight(Backend& backend, std::span<scalar> grads, const matrix& x, const matrix& mean,
                         const matrix& rstd, const matrix& dy) const {
        backend.layer_norm_backward_weight(x, mean, rstd, dy, weight(grads), bias(grads));
    }

private:
    template <class T>
    std::span<T> weight(std::span<T> buffer) const {
        return buffer.subspan(weight_offset_, std::size_t(width_));
    }
    template <class T>
    std::span<T> bias(std::span<T> buffer) const {
        return buffer.subspan(bias_offset_, std::size_t(width_));
    }

    int width_ = 0;
    std::size_t weight_offset_ = 0;
    std::size_t bias_offset_ = 0;
};

}  // namespace weft::nn
