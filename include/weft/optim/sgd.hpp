// Stochastic gradient descent with momentum and weight decay, PyTorch's torch.optim.SGD
// update (dampening 0, no Nesterov), on a flat parameter buffer or a shard of it.
// Weight decay applies to 2-D+ tensors only, as for AdamW.
#pragma once

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
#include "weft/optim/decay_mask.hpp"
#include "weft/optim/optimizer_state.hpp"
#include "weft/optim/sgd_update.hpp"

namespace weft::optim {

struct sgd_options {
    double lr = 0.01;
    double momentum = 0;
    double weight_decay = 0;

    void validate() const {
        require(std::isfinite(lr) && lr > 0, "sgd lr", lr, "must be finite and positive");
        require(momentum >= 0 && momentum < 1, "sgd momentum", momentum, "must be in [0, 1)");
        require(std::isfinite(weight_decay) && weight_decay >= 0, "sgd weight_decay", weight_decay,
                "must be finite and non-negative");
    }
};

template <std::floating_point Scalar>
class basic_sgd {
public:
    explicit basic_sgd(sgd_options options) : options_(options) { options_.validate(); }

    [[nodiscard]] const sgd_options& options() const { return options_; }
    void set_lr(double lr) {
        require(std::isfinite(lr) && lr > 0, "sgd lr", lr, "must be finite and positive");
        options_.lr = lr;
    }

    // params and grads cover elements [offset, offset + params.size()) of the
    // registry's flat layout: the whole buffer, or this rank's ZeRO shard. Every gradient is
    // multiplied by grad_scale first (gradient clipping; 1: none). The momentum buffer is
    // sized on the first step; later steps must match it.
    void step(std::span<Scalar> params, std::span<const Scalar> grads, const weft::parameter_registry& registry,
              std::size_t offset = 0, Scalar grad_scale = Scalar(1)) {
        step(params, grads, registry, offset, grad_scale,
             [](std::span<Scalar> p, std::span<const Scalar> g, std::span<Scalar> buffer,
                const sgd_factors<Scalar>& f, bool decays) { sgd_update_on_host<Scalar>(p, g, buffer, f, decays); });
    }
    // The same, each range updated by update(params, grads, buffer, factors, decays): the
    // host's sgd_update_on_host, or a backend's kernel that computes it where the buffers live.
    template <class Update>
    void step(std::span<Scalar> params, std::span<const Scalar> grads, const weft::parameter_registry& registry,
              std::size_t offset, Scalar grad_scale, Update&& update) {
        require(grads.size() == params.size(), "sgd step: grads.size()", grads.size(),
                "must equal params.size() = " + std::to_string(params.size()));
        require(std::isfinite(grad_scale) && grad_scale >= 0, "sgd step: grad_scale", grad_scale,
                "must be finite and >= 0");
        const bool use_momentum = options_.momentum > 0;
        if (use_momentum) {
            // Zeros from the state memory (a GPU's: set there); the first step overwrites them.
            if (steps_ == 0)
                momentum_buffer_ = lazy_zeros<Scalar>(params.size(), momentum_buffer_.get_allocator().memory());
            require(momentum_buffer_.size() == params.size(), "sgd step: params.size()", params.size(),
                    "must equal the size of earlier steps " + std::to_string(momentum_buffer_.size()));
        }
        const sgd_factors<Scalar> factors{.lr = Scalar(options_.lr),
                                          .momentum = Scalar(options_.momentum),
                                          .weight_decay = Scalar(options_.weight_decay),
                                          .grad_scale = grad_scale,
                                          .use_momentum = use_momentum,
                                          .first_step = steps_ == 0};
        for_each_decay_range(registry, offset, params.size(), [&](std::size_t lo, std::size_t hi, bool decays) {
            const std::span<Scalar> buffer =
                use_momentum ? std::span<Scalar>(momentum_buffer_).subspan(lo, hi - lo) : std::span<Scalar>();
            update(params.subspan(lo, hi - lo), grads.subspan(lo, hi - lo), buffer, factors, decays);
        });
        ++steps_;
    }

    [[nodiscard]] std::uint64_t step_count() const { return steps_; }
    // Empty until the first step, and always when momentum is 0.
    [[nodiscard]] std::span<Scalar> momentum_buffer() { return momentum_buffer_; }
    [[nodiscard]] std::span<const Scalar> momentum_buffer() const { return momentum_buffer_; }
    [[nodiscard]] std::size_t state_elements() const { return momentum_buffer_.size(); }

    // The state as named tensors (PyTorch's name), in the layout step() is called with.
    static constexpr std::array<std::string_view, 1> state_names{"momentum_buffer"};
    [[nodiscard]] std::array<state_tensor_view<Scalar>, 1> state_views() const {
        return {{{state_names[0], momentum_buffer_}}};
    }
    [[nodiscard]] optimizer_state<Scalar> export_state() const { return copy_state<Scalar>(steps_, state_views()); }
    // Moves the state out without copying it; the buffer is left empty.
    [[nodiscard]] optimizer_state<Scalar> take_state() {
        optimizer_state<Scalar> state{steps_, {}};
        state.tensors.push_back({std::string(state_names[0]), std::exchange(momentum_buffer_, {})});
        return state;
    }

    // Puts back a saved state: the momentum buffer in the layout step() is called with (the
    // next step checks its size; empty without momentum) and the number of steps taken.
    void import_state(optimizer_state<Scalar> state) {
        const std::uint64_t steps = state.steps;
        auto [buffer] = detail::take_state_tensors("sgd", std::move(state), state_names);
        require(options_.momentum > 0 || buffer.empty(), "sgd state: momentum_buffer size", buffer.size(),
                "must be 0: this sgd has no momentum (momentum = 0)");
        momentum_buffer_ = std::move(buffer);
        steps_ = steps;
    }

private:
    sgd_options options_;
    state_vector<Scalar> momentum_buffer_;
    std::uint64_t steps_ = 0;
};

using sgd = basic_sgd<float>;

}  // namespace weft::optim
