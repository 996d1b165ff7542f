// AdamW with torch.optim.AdamW's exact update (decoupled decay before the Adam step,
// bias correction, eps added outside sqrt(v_hat)) on a flat buffer or a shard of it.
// Weight decay applies to 2-D+ tensors only (per the registry); moments are flat buffers.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "weft/core/error.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/nn/parameter_registry.hpp"
#include "weft/optim/decay_mask.hpp"
#include "weft/optim/optimizer_state.hpp"

namespace weft::optim {

struct adamw_options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;

    void validate() const {
        require(std::isfinite(lr) && lr > 0, "adamw lr", lr, "must be finite and positive");
        require(beta1 >= 0 && beta1 < 1, "adamw beta1", beta1, "must be in [0, 1)");
        require(beta2 >= 0 && beta2 < 1, "adamw beta2", beta2, "must be in [0, 1)");
        require(eps > 0, "adamw eps", eps, "must be positive");
        require(std::isfinite(weight_decay) && weight_decay >= 0, "adamw weight_decay", weight_decay,
                "must be finite and non-negative");
    }
};

template <std::floating_point Scalar>
class basic_adamw {
public:
    explicit basic_adamw(adamw_options options) : options_(options) { options_.validate(); }

    [[nodiscard]] const adamw_options& options() const { return options_; }
    void set_lr(double lr) {
        require(std::isfinite(lr) && lr > 0, "adamw lr", lr, "must be finite and positive");
        options_.lr = lr;
    }

    // params and grads cover elements [offset, offset + params.size()) of the
    // registry's flat layout: the whole buffer, or this rank's ZeRO shard.
    // Moments are sized on the first step; later steps must match them.
    void step(std::span<Scalar> params, std::span<const Scalar> grads,
              const nn::parameter_registry& registry, std::size_t offset = 0) {
        require(grads.size() == params.size(), "adamw step: grads.size()", grads.size(),
                "must equal params.size() = " + std::to_string(params.size()));
        if (steps_ == 0) {
            m_.assign(params.size(), Scalar(0));
            v_.assign(params.size(), Scalar(0));
        }
        require(m_.size() == params.size(), "adamw step: params.size()", params.size(),
                "must equal the size of earlier steps " + std::to_string(m_.size()));
        const std::uint64_t t = steps_ + 1;
        // As PyTorch: scalar factors in double, rounded once to the tensor's type.
        const Scalar decay_factor = Scalar(1.0 - options_.lr * options_.weight_decay);
        const Scalar one_minus_beta1 = Scalar(1.0 - options_.beta1);
        const Scalar beta1 = Scalar(options_.beta1);
        const Scalar beta2 = Scalar(options_.beta2);
        const Scalar one_minus_beta2 = Scalar(1.0 - options_.beta2);
        const double bias_correction1 = 1.0 - std::pow(options_.beta1, double(t));
        const double bias_correction2 = 1.0 - std::pow(options_.beta2, double(t));
        const Scalar step_size = Scalar(options_.lr / bias_correction1);
        const Scalar bias_correction2_sqrt = Scalar(std::sqrt(bias_correction2));
        const Scalar eps = Scalar(options_.eps);
        const bool lerp_from_start = options_.beta1 > 0.5;  // torch.lerp's two forms
        const factors f{decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size,
                        bias_correction2_sqrt, eps};
        for_each_decay_range(registry, offset, params.size(), [&](std::size_t lo, std::size_t hi, bool decays) {
            // Chunks small enough to stay in L1 between the statements below, so each element
            // of the four buffers crosses the memory bus once, as in a single fused loop.
            for (std::size_t first = lo; first < hi; first += chunk) {
                const auto n = static_cast<Eigen::Index>(std::min(chunk, hi - first));
                update(array_map(params.data() + first, n), const_array_map(grads.data() + first, n),
                       array_map(m_.data() + first, n), array_map(v_.data() + first, n), f, decays,
                       lerp_from_start);
            }
        });
        steps_ = t;
    }

    [[nodiscard]] std::uint64_t step_count() const { return steps_; }
    // First and second moments, same layout as the parameters (empty before the first step).
    [[nodiscard]] std::span<Scalar> exp_avg() { return m_; }
    [[nodiscard]] std::span<const Scalar> exp_avg() const { return m_; }
    [[nodiscard]] std::span<Scalar> exp_avg_sq() { return v_; }
    [[nodiscard]] std::span<const Scalar> exp_avg_sq() const { return v_; }
    [[nodiscard]] std::size_t state_elements() const { return m_.size() + v_.size(); }

    // The state as named tensors (PyTorch's names), in the layout step() is called with.
    static constexpr std::array<std::string_view, 2> state_names{"exp_avg", "exp_avg_sq"};
    [[nodiscard]] std::array<state_tensor_view<Scalar>, 2> state_views() const {
        return {{{state_names[0], m_}, {state_names[1], v_}}};
    }
    [[nodiscard]] optimizer_state<Scalar> export_state() const { return copy_state<Scalar>(steps_, state_views()); }
    // Moves the state out without copying it (a layout switch frees it tensor by tensor as
    // it goes); the moments are left empty.
    [[nodiscard]] optimizer_state<Scalar> take_state() {
        optimizer_state<Scalar> state{steps_, {}};
        state.tensors.push_back({std::string(state_names[0]), std::exchange(m_, {})});
        state.tensors.push_back({std::string(state_names[1]), std::exchange(v_, {})});
        return state;
    }

    // Puts back a saved state (a checkpoint, or a layout switch): both moments in the layout
    // step() is called with (the next step checks their size), and the number of steps
    // taken, which drives bias correction. At steps = 0 the first step starts them afresh.
    void import_state(optimizer_state<Scalar> state) {
        const std::uint64_t steps = state.steps;
        auto [m, v] = detail::take_state_tensors("adamw", std::move(state), state_names);
        m_ = std::move(m);
        v_ = std::move(v);
        steps_ = steps;
    }

private:
    using array = Eigen::Array<Scalar, Eigen::Dynamic, 1>;
    using array_map = Eigen::Map<array>;
    using const_array_map = Eigen::Map<const array>;
    static constexpr std::size_t chunk = 1024;

    struct factors {
        Scalar decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
    };

    // torch.optim.AdamW's single-tensor update, element by element and in PyTorch's order
    // of operations; Eigen's packet math vectorises it (a scalar loop does not vectorise
    // under GCC's default -fmath-errno, because of std::sqrt), and every operation is an
    // IEEE-rounded +, -, *, / or sqrt, so the result is the scalar loop's, bit for bit.
    static void update(array_map p, const_array_map g, array_map m, array_map v, const factors& f, bool decays,
                       bool lerp_from_start) {
        if (decays) p *= f.decay;
        if (lerp_from_start)
            m += f.one_minus_beta1 * (g - m);
        else
            m = g - (g - m) * f.beta1;
        v = v * f.beta2 + f.one_minus_beta2 * g * g;
        p += -f.step_size * (m / (v.sqrt() / f.bias_correction2_sqrt + f.eps));
    }

    adamw_options options_;
    state_vector<Scalar> m_;
    state_vector<Scalar> v_;
    std::uint64_t steps_ = 0;
};

using adamw = basic_adamw<float>;

}  // namespace weft::optim
