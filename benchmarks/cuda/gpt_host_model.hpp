// A GPT-2's flat parameters for the CUDA step benchmark, in the CPU model's layout: the
// parameter registry the nn/ layers register (host-compiled, as the layers need the CPU
// backend and Eigen stays out of nvcc) and weights at GPT-2's per-tensor scales.
#pragma once

#include <vector>

#include "weft/nn/gpt_config.hpp"
#include "weft/nn/parameter_registry.hpp"

namespace weft_bench {

struct gpt_host_model {
    weft::nn::parameter_registry registry;
    std::vector<float> parameters;
};

// The registry is nn::gpt_stage's over every unit; the weights follow nn::gpt_init's
// scales (N(0, 0.02)-sized, scaled residual projections, LayerNorm weight 1, biases 0) but
// are drawn uniformly from a hash, in a second or two for 350M parameters where the
// counter-based normal draw takes tens of seconds: a timing run needs the scales, not the draw.
gpt_host_model make_gpt_host_model(const weft::nn::gpt_config& config);

}  // namespace weft_bench
