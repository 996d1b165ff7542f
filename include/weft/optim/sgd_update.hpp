// SGD's element update, apart from the optimizer that owns the momentum buffer: one range of
// flat buffers updated on the host with a step's factors. optim::sgd calls it for each range
// of a step; a compute backend with optimizer kernels (exec/compute_backend.hpp) applies the
// same update where its buffers live (exec::cuda: one kernel on the GPU, bit for bit this).
// Plain C++ without Eigen, so that nvcc compiles the factors into exec::cuda's kernel.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "weft/core/error.hpp"

namespace weft::optim {

// One step's scalars, as torch.optim.SGD (dampening 0, no Nesterov) uses them.
template <class Scalar>
struct sgd_factors {
    Scalar lr;
    Scalar momentum;
    Scalar weight_decay;  // for ranges that decay (2-D+ tensors)
    Scalar grad_scale;    // every gradient times this first (clipping; 1: none)
    bool use_momentum;    // momentum > 0: the buffer is read and written
    bool first_step;      // the buffer starts at the first gradient, not at zero
};

// One SGD update of params from grads, with the momentum buffer (empty without momentum):
// the same range of a stage's flat buffers, in PyTorch's order of operations.
template <class Scalar>
void sgd_update_on_host(std::span<Scalar> params, std::span<const Scalar> grads, std::span<Scalar> buffer,
                        const sgd_factors<Scalar>& f, bool decays) {
    require(grads.size() == params.size(), "sgd update: grads.size()", grads.size(),
            "must equal params.size() = " + std::to_string(params.size()));
    require(buffer.size() == (f.use_momentum ? params.size() : 0), "sgd update: momentum buffer size", buffer.size(),
            "must be params.size() = " + std::to_string(params.size()) + " with momentum, 0 without");
    const bool decay = decays && f.weight_decay != Scalar(0);
    for (std::size_t i = 0; i < params.size(); ++i) {
        Scalar g = grads[i];
        if (f.grad_scale != Scalar(1)) g *= f.grad_scale;
        if (decay) g += f.weight_decay * params[i];
        if (f.use_momentum) {
            buffer[i] = f.first_step ? g : f.momentum * buffer[i] + g;
            g = buffer[i];
        }
        params[i] -= f.lr * g;
    }
}

}  // namespace weft::optim
