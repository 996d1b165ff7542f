// Which part of a stage's flat buffer a data-parallel rank owns under ZeRO: the buffer is
// padded to a multiple of the number of ranks and cut into equal contiguous ranges, rank r
// owning range r. Equal ranges are what all-gather and reduce-scatter exchange.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "weft/core/error.hpp"

namespace weft::shard {

struct flat_shard {
    std::size_t total = 0;   // elements of the unpadded buffer (the registry's total size)
    std::size_t padded = 0;  // total rounded up to a multiple of the number of ranks
    std::size_t offset = 0;  // first element of this rank's range
    std::size_t size = 0;    // elements per range: padded / ranks
    // Elements of this rank's range that lie inside the real buffer (the last ranks' ranges
    // may be partly or wholly padding): what the optimizer steps and keeps moments for.
    [[nodiscard]] std::size_t valid() const { return offset >= total ? 0 : std::min(size, total - offset); }
};

[[nodiscard]] inline flat_shard shard_of(std::size_t total, int ranks, int rank) {
    require(ranks >= 1, "shard_of: ranks", ranks, "must be >= 1");
    require(rank >= 0 && rank < ranks, "shard_of: rank", rank, "must be in [0, " + std::to_string(ranks) + ")");
    const auto n = static_cast<std::size_t>(ranks);
    const std::size_t size = (total + n - 1) / n;
    return {total, size * n, size * static_cast<std::size_t>(rank), size};
}

}  // namespace weft::shard
