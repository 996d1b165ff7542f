// The parameter registry: for every tensor a stage holds, its global name, shape
// and place in the stage's flat parameter buffer. Gradients and optimizer moments
// use the same offsets, so a ZeRO shard or a checkpoint is a walk over this list.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::nn {

struct parameter_info {
    std::string name;        // global (unsplit model) name, e.g. "blocks.3.fc1.weight"
    std::vector<int> shape;  // global shape
    std::size_t offset = 0;  // first element in the flat buffer
    std::size_t size = 0;    // number of elements (product of shape)
};

class parameter_registry {
public:
    // Appends a tensor after the last one; returns its offset in the flat buffer.
    std::size_t add(std::string name, std::vector<int> shape) {
        require(!name.empty(), "parameter name", name, "must not be empty");
        require(!shape.empty(), "shape of " + name, shape.size(), "must have at least one dimension");
        std::size_t size = 1;
        for (int d : shape) {
            require(d > 0, "shape of " + name + " (a dimension)", d, "must be positive");
            size *= std::size_t(d);
        }
        if (index_.contains(name))
            throw invalid_argument("parameter name", name, "is already registered");
        const std::size_t offset = total_size_;
        index_.emplace(name, entries_.size());
        entries_.push_back({std::move(name), std::move(shape), offset, size});
        total_size_ += size;
        return offset;
    }

    [[nodiscard]] std::span<const parameter_info> entries() const { return entries_; }
    [[nodiscard]] std::size_t total_size() const { return total_size_; }
    [[nodiscard]] bool contains(std::string_view name) const {
        return index_.contains(std::string(name));
    }

    [[nodiscard]] const parameter_info& find(std::string_view name) const {
        const auto it = index_.find(std::string(name));
        if (it == index_.end())
            throw invalid_argument("parameter name", name,
                                   "is not registered (see parameter_registry::entries())");
        return entries_[it->second];
    }

private:
    std::vector<parameter_info> entries_;
    std::unordered_map<std::string, std::size_t> index_;
    std::size_t total_size_ = 0;
};

}  // namespace weft::nn
