// When ZeRO-2 and ZeRO-3 reduce gradients, and so what they hold during a step, as DeepSpeed
// and PyTorch's FSDP offer:
//   step:       the backwards add every micro-batch's gradients into the stage's full buffer,
//               reduce-scattered once at REDUCE_GRAD; ZeRO-3 gathers the stage's parameters
//               whole from UNSHARD to RESHARD. The least traffic.
//   microbatch: each layer's gradients are reduced as soon as a micro-batch's backward has
//               added them, and its part of the full buffer freed (shard/layer_reduce.hpp);
//               ZeRO-3 gathers each layer's parameters just before use, fetching the next
//               meanwhile, and frees them after (shard/layer_gather.hpp). The least memory.
// ZeRO-0 and ZeRO-1 keep whole gradients by definition and reduce once per step either way.
#pragma once

#include <string>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft::shard {

enum class zero_reduce { step, microbatch };

[[nodiscard]] inline std::string_view to_string(zero_reduce mode) {
    return mode == zero_reduce::step ? "step" : "microbatch";
}

// `option` names the setting in the error (e.g. "--zero-reduce").
[[nodiscard]] inline zero_reduce parse_zero_reduce(std::string_view text, std::string_view option) {
    if (text == "step") return zero_reduce::step;
    if (text == "microbatch") return zero_reduce::microbatch;
    throw invalid_argument(std::string(option), std::string(text),
                           "valid: step (reduce once per step: least traffic) or microbatch (reduce each layer per "
                           "micro-batch, ZeRO-3 gathering layer by layer: least memory)");
}

}  // namespace weft::shard
