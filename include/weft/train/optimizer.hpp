// The engine's optimizer, chosen at run time (--optimizer adamw|sgd) and held per
// stage behind one small interface, so one engine binary trains with either.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/nn/parameter_registry.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/optim/sgd.hpp"

namespace weft::train {

enum class optimizer_kind { adamw, sgd };

inline constexpr std::array<std::pair<optimizer_kind, std::string_view>, 2> optimizer_names{{
    {optimizer_kind::adamw, "adamw"},
    {optimizer_kind::sgd, "sgd"},
}};

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
class optimizer {
public:
    virtual ~optimizer() = default;
    // parameters and gradients cover elements [offset, offset + parameters.size()) of the
    // registry's flat layout: a whole stage, or this rank's ZeRO range of it.
    virtual void step(std::span<Scalar> parameters, std::span<const Scalar> gradients,
                      const nn::parameter_registry& registry, std::size_t offset = 0) = 0;
    // Elements of optimizer state held (moments, momentum buffers), for memory reports.
    [[nodiscard]] virtual std::size_t state_elements() const = 0;
    // The AdamW behind this interface, for checkpoints of its moments; null for SGD.
    virtual optim::basic_adamw<Scalar>* adamw() { return nullptr; }
};

namespace detail {

template <class Scalar, class Impl>
class optimizer_model final : public optimizer<Scalar> {
public:
    explicit optimizer_model(Impl impl) : impl_(std::move(impl)) {}
    void step(std::span<Scalar> parameters, std::span<const Scalar> gradients,
              const nn::parameter_registry& registry, std::size_t offset = 0) override {
        impl_.step(parameters, gradients, registry, offset);
    }
    [[nodiscard]] std::size_t state_elements() const override { return impl_.state_elements(); }
    optim::basic_adamw<Scalar>* adamw() override {
        if constexpr (std::is_same_v<Impl, optim::basic_adamw<Scalar>>) return &impl_;
        else return nullptr;
    }

private:
    Impl impl_;
};

}  // namespace detail

template <class Scalar>
[[nodiscard]] std::unique_ptr<optimizer<Scalar>> make_optimizer(const optimizer_options& o) {
    switch (o.kind) {
        case optimizer_kind::adamw:
            return std::make_unique<detail::optimizer_model<Scalar, optim::basic_adamw<Scalar>>>(
                optim::basic_adamw<Scalar>(optim::adamw_options{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}));
        case optimizer_kind::sgd:
            return std::make_unique<detail::optimizer_model<Scalar, optim::basic_sgd<Scalar>>>(
                optim::basic_sgd<Scalar>(optim::sgd_options{o.lr, o.momentum, o.weight_decay}));
    }
    throw invalid_argument("optimizer kind", static_cast<int>(o.kind), "expected adamw or sgd");
}

}  // namespace weft::train
