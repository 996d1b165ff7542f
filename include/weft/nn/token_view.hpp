// A micro-batch of token ids as the first GPT stage takes it: `rows` sequences of
// `seq_len` tokens each, row-major, viewed (not owned) from the data loader's buffer.
#pragma once

#include <cstdint>
#include <span>

namespace weft::nn {

struct token_view {
    std::span<const std::int32_t> tokens;
    int rows = 0;
    int seq_len = 0;
};

}  // namespace weft::nn
