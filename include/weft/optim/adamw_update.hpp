// AdamW's element update, apart from the optimizer that owns the moments: one range of flat
// buffers updated on the host with a step's factors (optim/adamw_factors.hpp). optim::adamw
// calls it for each range of a step; a compute backend with optimizer kernels
// (exec/compute_backend.hpp) applies the same update where its buffers live (exec::cuda: one
// kernel on the GPU).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include <Eigen/Core>

#include "weft/core/error.hpp"
#include "weft/optim/adamw_factors.hpp"

namespace weft::optim {

namespace detail {

template <class Scalar>
using adamw_array = Eigen::Array<Scalar, Eigen::Dynamic, 1>;

// torch.optim.AdamW's single-tensor update, element by element and in PyTorch's order of
// operations; every operation is an IEEE-rounded +, -, *, / or sqrt, so the result is the
// scalar loop's, bit for bit (exec::cuda's kernel is held to it). Eigen's packet math
// vectorises the moments' statements. Not Eigen's sqrt(): its vectorised float form under
// the default EIGEN_FAST_MATH is an approximate reciprocal square root and a Newton step,
// off in the last bits for about 4 elements in 10. std::sqrt is correctly rounded but does
// not vectorise under GCC's default -fmath-errno, so the parameters' statement runs scalar
// (the whole update then takes about 2.8 times as long; exactness is the contract).
template <class Scalar, class Gradients>
void adamw_update_chunk(Eigen::Map<adamw_array<Scalar>> p, const Gradients& g, Eigen::Map<adamw_array<Scalar>> m,
                        Eigen::Map<adamw_array<Scalar>> v, const adamw_factors<Scalar>& f, bool decays) {
    if (decays) p *= f.decay;
    if (f.lerp_from_start)
        m += f.one_minus_beta1 * (g - m);
    else
        m = g - (g - m) * f.beta1;
    v = v * f.beta2 + f.one_minus_beta2 * g * g;
    p += -f.step_size * (m / (v.unaryExpr([](Scalar x) { return std::sqrt(x); }) / f.bias_correction2_sqrt + f.eps));
}

}  // namespace detail

// One AdamW update of params, with the moments m and v, from grads (times f.grad_scale):
// four spans of one size, the same range of a stage's flat buffers.
template <std::floating_point Scalar>
void adamw_update_on_host(std::span<Scalar> params, std::span<const Scalar> grads, std::span<Scalar> m,
                          std::span<Scalar> v, const adamw_factors<Scalar>& f, bool decays) {
    require(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(),
            "adamw update: grads, m, v sizes",
            std::to_string(grads.size()) + ", " + std::to_string(m.size()) + ", " + std::to_string(v.size()),
            "must each equal params.size() = " + std::to_string(params.size()));
    using array = detail::adamw_array<Scalar>;
    using map = Eigen::Map<array>;
    using const_map = Eigen::Map<const array>;
    // Chunks small enough to stay in L1 between the statements of the update, so each
    // element of the four buffers crosses the memory bus once, as in a single fused loop.
    constexpr std::size_t chunk = 1024;
    std::array<Scalar, chunk> scaled{};  // the chunk's gradients times grad_scale
    for (std::size_t first = 0; first < params.size(); first += chunk) {
        const auto n = static_cast<Eigen::Index>(std::min(chunk, params.size() - first));
        const map p(params.data() + first, n), mm(m.data() + first, n), vv(v.data() + first, n);
        const const_map g(grads.data() + first, n);
        if (f.grad_scale == Scalar(1)) {
            detail::adamw_update_chunk<Scalar>(p, g, mm, vv, f, decays);
        } else {
            map s(scaled.data(), n);
            s = g * f.grad_scale;
            detail::adamw_update_chunk<Scalar>(p, const_map(scaled.data(), n), mm, vv, f, decays);
        }
    }
}

}  // namespace weft::optim
