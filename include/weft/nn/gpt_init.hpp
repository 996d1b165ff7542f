// GPT-2's initialization (as llm.c and Hugging Face): weights N(0, 0.02), the residual
// projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 * num_layers)), biases 0,
// LayerNorm weight 1. Chosen by tensor name, drawn by (seed, name, index): split-independent.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "weft/core/parameter_registry.hpp"
#include "weft/core/rng.hpp"

namespace weft::nn {

// The standard deviation GPT-2 draws tensor `name` from; 0 for tensors that start
// constant (biases, LayerNorm), whose value gpt_initial_constant gives.
[[nodiscard]] inline double gpt_init_std(std::string_view name, int num_layers) {
    constexpr double std_dev = 0.02;
    const bool is_layer_norm = name.starts_with("ln_f.") || name.find(".ln_1.") != std::string_view::npos ||
                               name.find(".ln_2.") != std::string_view::npos;
    if (is_layer_norm || name.ends_with(".bias")) return 0.0;
    if (name.ends_with("c_proj.weight")) return std_dev / std::sqrt(2.0 * double(num_layers));
    return std_dev;
}

[[nodiscard]] inline double gpt_initial_constant(std::string_view name) {
    const bool is_layer_norm = name.starts_with("ln_f.") || name.find(".ln_1.") != std::string_view::npos ||
                               name.find(".ln_2.") != std::string_view::npos;
    return is_layer_norm && name.ends_with(".weight") ? 1.0 : 0.0;
}

// Fills every tensor of `registry` in `params`. A tensor-parallel slice draws each element
// by its index in the global tensor, so the slices of all tp ranks together are exactly
// the tensor an unsplit model draws.
template <class Scalar>
void gpt_initialize(const parameter_registry& registry, std::span<Scalar> params, std::uint64_t seed,
                    int num_layers) {
    for (const parameter_info& info : registry.entries()) {
        const auto values = params.subspan(info.offset, info.size);
        const double std_dev = gpt_init_std(info.name, num_layers);
        if (std_dev == 0.0) {
            const Scalar constant = Scalar(gpt_initial_constant(info.name));
            for (auto& v : values) v = constant;
        } else {
            info.for_each_run([&](std::size_t local, std::size_t global, std::size_t length) {
                for (std::size_t j = 0; j < length; ++j)
                    values[local + j] = Scalar(double(rng::normal(seed, info.name, global + j)) * std_dev);
            });
        }
    }
}

}  // namespace weft::nn
