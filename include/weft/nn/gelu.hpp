// The GELU activation (tanh approximation, as GPT-2). It has no weights, so its
// backward is input-only and the weight half of a split backward has nothing to do.
#pragma once

#include "weft/exec/compute_backend.hpp"

namespace weft::nn {

template <compute_backend Backend>
struct gelu {
    using matrix = typename Backend::matrix;

    [[nodiscard]] static matrix forward(Backend& backend, const matrix& x) { return backend.gelu_forward(x); }
    // x is the forward input, dy the gradient of the output.
    [[nodiscard]] static matrix backward_input(Backend& backend, const matrix& x, const matrix& dy) {
        return backend.gelu_backward(x, dy);
    }
};

}  // namespace weft::nn
