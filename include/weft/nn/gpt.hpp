// The GPT-2 model in one include: its config, the stage partition, one stage and its loss.
// Units: 0 = token + position embedding, 1..num_layers = transformer blocks,
// num_layers+1 = ln_f and the LM head tied to wte.
#pragma once

#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/token_view.hpp"
