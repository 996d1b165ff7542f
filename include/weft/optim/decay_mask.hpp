// Which elements of a flat parameter buffer get weight decay: those of tensors with
// two or more dimensions (weight matrices), never biases or layer-norm weights.
// Shared by the optimizers so that SGD and AdamW agree, and shard-aware via `offset`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"

namespace weft::optim {

// Calls fn(first, last, decays) for every piece of [offset, offset + size) of the
// registry's flat layout, with [first, last) relative to `offset`.
template <class Fn>
void for_each_decay_range(const weft::parameter_registry& registry, std::size_t offset, std::size_t size,
                          Fn&& fn) {
    require(offset + size <= registry.total_size(), "optimizer: offset + params.size()", offset + size,
            "must not exceed the registry's total size " + std::to_string(registry.total_size()));
    const std::size_t end = offset + size;
    for (const auto& entry : registry.entries()) {
        const std::size_t first = std::max(entry.offset, offset);
        const std::size_t last = std::min(entry.offset + entry.size, end);
        if (first < last) fn(first - offset, last - offset, entry.shape.size() >= 2);
    }
}

}  // namespace weft::optim
