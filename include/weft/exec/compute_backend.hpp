// The compute_backend concept: what nn/ layers need from a backend (a matrix type
// and static kernels), so that a CUDA backend can replace the Eigen one without
// touching any layer.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>

namespace weft::exec {

// Kernels take weights as spans into a stage's flat parameter buffer and
// activations as Backend::matrix (rows = samples). Weight-gradient kernels
// accumulate (+=) into spans of the flat gradient buffer.
template <class B>
concept compute_backend =
    requires {
        { B::name } -> std::convertible_to<std::string_view>;
        typename B::scalar;
        typename B::matrix;
    } && std::floating_point<typename B::scalar> &&
    requires(const typename B::matrix& x, typename B::matrix& out,
             std::span<const typename B::scalar> w, std::span<typename B::scalar> dw,
             std::span<const std::int32_t> labels, typename B::scalar s, int n) {
        { B::rows(x) } -> std::convertible_to<int>;
        { B::cols(x) } -> std::convertible_to<int>;
        { B::add(x, x) } -> std::same_as<typename B::matrix>;
        { B::linear_forward(x, w, w, n, n) } -> std::same_as<typename B::matrix>;
        { B::linear_backward_input(x, w, n, n) } -> std::same_as<typename B::matrix>;
        B::linear_backward_weight(x, x, dw, dw);
        { B::gelu_forward(x) } -> std::same_as<typename B::matrix>;
        { B::gelu_backward(x, x) } -> std::same_as<typename B::matrix>;
        { B::layer_norm_forward(x, w, w, s, out, out) } -> std::same_as<typename B::matrix>;
        { B::layer_norm_backward_input(x, x, x, w, x) } -> std::same_as<typename B::matrix>;
        B::layer_norm_backward_weight(x, x, x, x, dw, dw);
        { B::cross_entropy(x, labels, s, out) } -> std::same_as<typename B::scalar>;
    };

}  // namespace weft::exec

namespace weft {
using exec::compute_backend;
}  // namespace weft
