// The shape of the MLP model: input Linear, residual GELU-MLP blocks, LayerNorm +
// Linear head. Its units (0 = input, 1..num_blocks = blocks, num_blocks+1 = head)
// are what pipeline stages split.
#pragma once

#include <cstdint>

#include "weft/core/error.hpp"

namespace weft::nn {

struct mlp_config {
    int input_dim = 0;
    int hidden_dim = 0;
    int num_blocks = 0;
    int num_classes = 0;
    int expansion = 4;  // block width = expansion * hidden_dim
    std::uint64_t seed = 1234;

    [[nodiscard]] int num_units() const { return num_blocks + 2; }

    void validate() const {
        require(input_dim >= 1, "mlp_config.input_dim", input_dim, "must be at least 1");
        require(hidden_dim >= 1, "mlp_config.hidden_dim", hidden_dim, "must be at least 1");
        require(num_blocks >= 0, "mlp_config.num_blocks", num_blocks, "must be at least 0");
        require(num_classes >= 2, "mlp_config.num_classes", num_classes, "must be at least 2");
        require(expansion >= 1, "mlp_config.expansion", expansion, "must be at least 1");
    }
};

}  // namespace weft::nn
