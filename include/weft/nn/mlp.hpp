// The MLP model in one include: its config, the stage partition, one stage and its loss.
// Units: 0 = input Linear, 1..num_blocks = residual GELU-MLP blocks, num_blocks+1 = head.
#pragma once

#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/mlp_config.hpp"
#include "weft/nn/mlp_stage.hpp"
#include "weft/nn/partition.hpp"
