// Mean softmax cross-entropy over a micro-batch and its gradient with respect to the
// logits, scaled by a caller-given factor: the engine passes 1/num_microbatches so
// that gradients accumulated over micro-batches equal the gradient of the mean loss.
// On a backend with exec::deferred_loss_kernels the loss is read when the caller reads it
// (core/deferred_value.hpp), not when the kernels are queued.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "weft/core/deferred_value.hpp"
#include "weft/core/error.hpp"
#include "weft/exec/compute_backend.hpp"

namespace weft::nn {

template <compute_backend Backend>
struct cross_entropy_result {
    deferred_value<typename Backend::scalar> loss;  // mean over rows, NOT multiplied by scale
    typename Backend::matrix dlogits;  // scale * d(loss)/d(logits)
};

// labels[r] is the class id of row r, in [0, logits.cols()).
template <compute_backend Backend>
[[nodiscard]] cross_entropy_result<Backend> cross_entropy(Backend& backend, const typename Backend::matrix& logits,
                                                          std::span<const std::int32_t> labels,
                                                          typename Backend::scalar scale = 1) {
    require(std::isfinite(double(scale)), "cross_entropy: scale", scale, "must be finite");
    cross_entropy_result<Backend> result{};
    if constexpr (exec::deferred_loss_kernels<Backend>)
        result.loss = backend.cross_entropy_deferred(logits, labels, scale, result.dlogits);
    else
        result.loss = backend.cross_entropy(logits, labels, scale, result.dlogits);
    return result;
}

}  // namespace weft::nn
