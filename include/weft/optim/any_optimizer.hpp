// The optimizer a run chooses at run time (--optimizer adamw|sgd) as one value type, so one
// engine binary trains with either and a training state holds it like any other value: it
// steps a stage's flat buffers (or a ZeRO range of them), and exports and imports its state
// as named tensors (optim/optimizer_state.hpp) without anyone asking which optimizer it is.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/optim/optimizer_state.hpp"
#include "weft/optim/sgd.hpp"

namespace weft::optim {

enum class optimizer_kind { adamw, sgd };

inline constexpr std::array<std::pair<optimizer_kind, std::string_view>, 2> optimizer_names{{
    {optimizer_kind::adamw, "adamw"},
    {optimizer_kind::sgd, "sgd"},
}};

[[nodiscard]] constexpr std::string_view to_string(optimizer_kind kind) {
    for (const auto& [k, name] : optimizer_names)
        if (k == kind) return name;
    return "unknown";
}

[[nodiscard]] inline optimizer_kind parse_optimizer_kind(std::string_view name) {
    for (const auto& [kind, known] : optimizer_names)
        if (known == name) return kind;
    throw invalid_argument("optimizer", name, "expected one of: adamw, sgd");
}

struct optimizer_options {
    optimizer_kind kind = optimizer_kind::adamw;
    double lr = 1e-3;
    double weight_decay = 0;
    double momentum = 0;  // sgd only
    double beta1 = 0.9;   // adamw only
    double beta2 = 0.999;
    double eps = 1e-8;
};

template <class Scalar>
class any_optimizer {
public:
    explicit any_optimizer(const optimizer_options& o) : impl_(make(o)) {}

    [[nodiscard]] optimizer_kind kind() const {
        return std::holds_alternative<basic_adamw<Scalar>>(impl_) ? optimizer_kind::adamw : optimizer_kind::sgd;
    }
    [[nodiscard]] std::string_view name() const { return to_string(kind()); }

    // parameters and gradients cover elements [offset, offset + parameters.size()) of the
    // registry's flat layout: a whole stage, or this rank's ZeRO range of it. Every gradient
    // is multiplied by grad_scale first (gradient clipping; 1: none).
    void step(std::span<Scalar> parameters, std::span<const Scalar> gradients, const weft::parameter_registry& registry,
              std::size_t offset = 0, Scalar grad_scale = Scalar(1)) {
        std::visit([&](auto& o) { o.step(parameters, gradients, registry, offset, grad_scale); }, impl_);
    }
    // The same, each range updated by a backend's optimizer kernel: AdamW's by
    // adamw_update(params, grads, m, v, factors, decays) (basic_adamw::step), SGD's by
    // sgd_update(params, grads, momentum_buffer, factors, decays) (basic_sgd::step).
    template <class AdamwUpdate, class SgdUpdate>
    void step(std::span<Scalar> parameters, std::span<const Scalar> gradients, const weft::parameter_registry& registry,
              std::size_t offset, Scalar grad_scale, AdamwUpdate&& adamw_update, SgdUpdate&& sgd_update) {
        if (auto* adamw = std::get_if<basic_adamw<Scalar>>(&impl_))
            adamw->step(parameters, gradients, registry, offset, grad_scale, adamw_update);
        else
            std::get<basic_sgd<Scalar>>(impl_).step(parameters, gradients, registry, offset, grad_scale, sgd_update);
    }

    [[nodiscard]] std::uint64_t step_count() const {
        return std::visit([](const auto& o) { return o.step_count(); }, impl_);
    }
    // The learning rate of the next steps (a schedule sets it before each step).
    void set_lr(double lr) {
        std::visit([&](auto& o) { o.set_lr(lr); }, impl_);
    }
    [[nodiscard]] double lr() const {
        return std::visit([](const auto& o) { return o.options().lr; }, impl_);
    }
    // Elements of state held (moments, momentum buffers), for memory reports.
    [[nodiscard]] std::size_t state_elements() const {
        return std::visit([](const auto& o) { return o.state_elements(); }, impl_);
    }
    // The names of the state tensors this optimizer keeps ("exp_avg", "exp_avg_sq"; or
    // "momentum_buffer"), in the order state_views gives them.
    [[nodiscard]] std::vector<std::string_view> state_names() const {
        return std::visit([](const auto& o) {
            return std::vector<std::string_view>(o.state_names.begin(), o.state_names.end());
        }, impl_);
    }
    [[nodiscard]] std::vector<state_tensor_view<Scalar>> state_views() const {
        return std::visit([](const auto& o) {
            const auto views = o.state_views();
            return std::vector<state_tensor_view<Scalar>>(views.begin(), views.end());
        }, impl_);
    }
    [[nodiscard]] optimizer_state<Scalar> export_state() const {
        return std::visit([](const auto& o) { return o.export_state(); }, impl_);
    }
    // Moves the state out without copying it (a layout switch); the optimizer's state
    // tensors are left empty.
    [[nodiscard]] optimizer_state<Scalar> take_state() {
        return std::visit([](auto& o) { return o.take_state(); }, impl_);
    }
    // weft::error naming the tensor when `state` is not this optimizer's (another
    // optimizer's names, a missing or extra tensor, sizes that differ).
    void import_state(optimizer_state<Scalar> state) {
        std::visit([&](auto& o) { o.import_state(std::move(state)); }, impl_);
    }

private:
    using variant = std::variant<basic_adamw<Scalar>, basic_sgd<Scalar>>;

    static variant make(const optimizer_options& o) {
        switch (o.kind) {
            case optimizer_kind::adamw:
                return basic_adamw<Scalar>(adamw_options{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
            case optimizer_kind::sgd: return basic_sgd<Scalar>(sgd_options{o.lr, o.momentum, o.weight_decay});
        }
        throw invalid_argument("optimizer kind", static_cast<int>(o.kind), "expected adamw or sgd");
    }

    variant impl_;
};

}  // namespace weft::optim
