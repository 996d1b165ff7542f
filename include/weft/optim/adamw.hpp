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

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/optim/adamw_update.hpp"
#include "weft/optim/decay_mask.hpp"
#include "weft/optim/optimizer_state.hpp"

namespace weft::optim {

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
    // registry's flat layout: the whole buffer, or this rank's ZeRO shard. Every gradient is
    // multiplied by grad_scale first (gradient clipping; 1: none). Moments are sized on the
    // first step; later steps must match them.
    void step(std::span<Scalar> params, std::span<const Scalar> grads, const weft::parameter_registry& registry,
              std::size_t offset = 0, Scalar grad_scale = Scalar(1)) {
        step(params, grads, registry, offset, grad_scale,
             [](auto&&... range) { adamw_update_on_host<Scalar>(range...); });
    }
    // The same, each range updated by update(params, grads, m, v, factors, decays), which must
    // do what adamw_update_on_host does (optim/adamw_update.hpp): a backend's optimizer
    // kernel, on the buffers where they live.
    template <class RangeUpdate>
    void step(std::span<Scalar> params, std::span<const Scalar> grads, const weft::parameter_registry& registry,
              std::size_t offset, Scalar grad_scale, RangeUpdate&& update) {
        require(grads.size() == params.size(), "adamw step: grads.size()", grads.size(),
                "must equal params.size() = " + std::to_string(params.size()));
        require(std::isfinite(grad_scale) && grad_scale >= 0, "adamw step: grad_scale", grad_scale,
                "must be finite and >= 0");
        if (steps_ == 0) {
            m_.assign(params.size(), Scalar(0));
            v_.assign(params.size(), Scalar(0));
        }
        require(m_.size() == params.size(), "adamw step: params.size()", params.size(),
                "must equal the size of earlier steps " + std::to_string(m_.size()));
        const std::uint64_t t = steps_ + 1;
        const auto factors = adamw_factors<Scalar>::of_step(options_, t, grad_scale);
        const std::span<Scalar> m(m_), v(v_);
        for_each_decay_range(registry, offset, params.size(), [&](std::size_t lo, std::size_t hi, bool decays) {
            update(params.subspan(lo, hi - lo), grads.subspan(lo, hi - lo), m.subspan(lo, hi - lo),
                   v.subspan(lo, hi - lo), factors, decays);
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
    adamw_options options_;
    state_vector<Scalar> m_;
    state_vector<Scalar> v_;
    std::uint64_t steps_ = 0;
};

using adamw = basic_adamw<float>;

}  // namespace weft::optim
