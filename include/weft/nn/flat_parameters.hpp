// A stage's trainable state in one place: the registry of its named tensors, and one flat
// buffer each for their values and their gradients in the registry's layout. Optimizers,
// checkpoints and gradient reductions work on these buffers, so every model's stage keeps
// them the same way by deriving from this class.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "weft/nn/parameter_registry.hpp"

namespace weft::nn {

template <class Scalar>
class flat_parameters {
public:
    [[nodiscard]] std::span<Scalar> parameters() { return params_; }
    [[nodiscard]] std::span<const Scalar> parameters() const { return params_; }
    [[nodiscard]] std::span<Scalar> gradients() { return grads_; }
    [[nodiscard]] std::span<const Scalar> gradients() const { return grads_; }
    void zero_gradients() { std::fill(grads_.begin(), grads_.end(), Scalar(0)); }
    [[nodiscard]] const parameter_registry& registry() const { return registry_; }

protected:
    // Layers register their tensors here while the stage is built...
    [[nodiscard]] parameter_registry& layer_registry() { return registry_; }
    // ...and then the buffers are sized to the registry, zero-filled.
    void allocate() {
        params_.assign(registry_.total_size(), Scalar(0));
        grads_.assign(registry_.total_size(), Scalar(0));
    }

private:
    parameter_registry registry_;
    std::vector<Scalar> params_;
    std::vector<Scalar> grads_;
};

}  // namespace weft::nn
