// What the planner needs to know of a model beyond its parameters: per unit (a layer the
// partition gives to stages) its relative compute cost, the activations a stage stashes per
// sample for it, and the tensor-parallel all-reduces of its forward; and what a pipeline send
// carries per sample. One overload of shape_of per model config; a model of one's own adds
// its overload to use the planner.
//
// Activations are estimates (the planner's memory is an estimate there, exact for the
// parameters, gradients and optimizer state): a GPT block stashes about 17C elements per token
// (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", count
// 34 s b h bytes at 2 bytes per element, the same 17C, plus 5 a s^2 b for the attention scores;
// train_gpt's reported activation peak matches 17C within 2 % and has no room for the scores
// at that size), the head its logits and the final LayerNorm, the embedding its output; an MLP
// block its input, fc1's output and the GELU's.
#pragma once

#include <cstddef>
#include <vector>

#include "weft/models/gpt.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/mlp_config.hpp"

namespace weft::plan {

struct unit_shape {
    double cost = 1;                           // relative compute cost (the units' ratios matter)
    double activation_elements_per_row = 0;    // stashed per sample until its backward
    double tp_allreduce_elements_per_row = 0;  // summed over the tp group per forward (again per backward)
};

struct model_shape {
    std::vector<unit_shape> units;          // one per unit, in order
    double boundary_elements_per_row = 0;   // a pipeline send per sample (activation or its gradient)
};

[[nodiscard]] inline model_shape shape_of(const nn::gpt_config& c) {
    const double width = c.d_model, tokens = c.seq_len, vocab = c.vocab_size;
    const std::vector<double> costs = models::gpt::unit_costs(c);
    model_shape shape;
    shape.boundary_elements_per_row = tokens * width;
    for (std::size_t u = 0; u < costs.size(); ++u) {
        unit_shape unit{.cost = costs[u],
                        .activation_elements_per_row = tokens * 17 * width,
                        .tp_allreduce_elements_per_row = 2 * tokens * width};  // attention and MLP outputs
        if (u == 0) unit = {.cost = costs[u], .activation_elements_per_row = tokens * width};
        if (u + 1 == costs.size())
            unit = {.cost = costs[u], .activation_elements_per_row = tokens * (2 * width + 2 * vocab)};
        shape.units.push_back(unit);
    }
    return shape;
}

[[nodiscard]] inline model_shape shape_of(const nn::mlp_config& c) {
    const double in = c.input_dim, hidden = c.hidden_dim, wide = static_cast<double>(c.expansion) * c.hidden_dim,
                 classes = c.num_classes;
    model_shape shape;
    shape.boundary_elements_per_row = hidden;
    shape.units.push_back({.cost = in * hidden, .activation_elements_per_row = in + hidden});
    for (int b = 0; b < c.num_blocks; ++b)
        shape.units.push_back({.cost = 2 * hidden * wide, .activation_elements_per_row = hidden + 2 * wide});
    shape.units.push_back({.cost = hidden * classes, .activation_elements_per_row = hidden + 2 * classes});
    return shape;
}

}  // namespace weft::plan
