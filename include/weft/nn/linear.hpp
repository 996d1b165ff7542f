// A fully connected layer y = x W + b with split backward: backward_input (dX) and
// backward_weight (dW, db) run separately, as zero-bubble schedules need.
// The layer owns no storage: it knows where its tensors sit in a stage's flat buffers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "weft/core/rng.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/parameter_registry.hpp"

namespace weft::nn {

template <compute_backend Backend>
class linear {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    linear() = default;
    // Registers `<prefix>.weight` [in, out] and `<prefix>.bias` [out].
    linear(parameter_registry& registry, const std::string& prefix, int in, int out)
        : in_(in), out_(out), weight_name_(prefix + ".weight"), bias_name_(prefix + ".bias") {
        weight_offset_ = registry.add(weight_name_, {in, out});
        bias_offset_ = registry.add(bias_name_, {out});
    }

    [[nodiscard]] int in_features() const { return in_; }
    [[nodiscard]] int out_features() const { return out_; }

    // Weights ~ N(0, 1/in) keyed by (seed, global name, element index); bias 0.
    void initialize(std::span<scalar> params, std::uint64_t seed) const {
        const double std_dev = 1.0 / std::sqrt(double(in_));
        auto w = weight(params);
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = scalar(double(rng::normal(seed, weight_name_, i)) * std_dev);
        for (auto& b : bias(params)) b = scalar(0);
    }

    [[nodiscard]] matrix forward(std::span<const scalar> params, const matrix& x) const {
        return Backend::linear_forward(x, weight(params), bias(params), in_, out_);
    }
    [[nodiscard]] matrix backward_input(std::span<const scalar> params, const matrix& dy) const {
        return Backend::linear_backward_input(dy, weight(params), in_, out_);
    }
    // Accumulates into the gradient buffer (same layout as the parameters).
    void backward_weight(std::span<scalar> grads, const matrix& x, const matrix& dy) const {
        Backend::linear_backward_weight(x, dy, weight(grads), bias(grads));
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

    int in_ = 0;
    int out_ = 0;
    std::string weight_name_;
    std::string bias_name_;
    std::size_t weight_offset_ = 0;
    std::size_t bias_offset_ = 0;
};

}  // namespace weft::nn
