// The parameter registry: for every tensor a stage holds, its global name, shape
// and place in the stage's flat parameter buffer. Gradients and optimizer moments
// use the same offsets, so a ZeRO shard or a checkpoint is a walk over this list.
//
// Tensor parallelism: a tensor may be split along one dimension over `count` ranks
// (see tensor_split). The registry then keeps the GLOBAL shape and this rank's element
// count, and for_each_run maps the rank's local elements to global ones; a rank that
// does not split anything has exactly the registry it had before splits existed.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft {

// [first, last) of one index range.
struct index_range {
    int first = 0;
    int last = 0;
    [[nodiscard]] int size() const { return last - first; }
    friend bool operator==(const index_range&, const index_range&) = default;
};

// Piece `index` of `count` of an extent: an even split where the first `extent % count`
// pieces are one larger (as numpy.array_split and Megatron's vocabulary ranges when they
// do not divide). Every tensor-parallel split in weft uses this one rule, so that any two
// ranks agree on who holds what from (extent, index, count) alone.
[[nodiscard]] inline index_range split_range(int extent, int index, int count) {
    require(count >= 1, "split_range: count", count, "must be at least 1");
    require(index >= 0 && index < count, "split_range: index", index,
            "must be in [0, count = " + std::to_string(count) + ")");
    require(extent >= 0, "split_range: extent", extent, "must not be negative");
    const int base = extent / count;
    const int extra = extent % count;
    const int first = index * base + (index < extra ? index : extra);
    return {first, first + base + (index < extra ? 1 : 0)};
}

// How a rank holds one tensor. dim == -1: the whole tensor (replicated). Otherwise the
// dimension `dim` is viewed as `parts` equal contiguous blocks (3 for c_attn's q | k | v),
// each block is split over `count` ranks by split_range, and this rank holds piece
// `index` of every block, concatenated in block order along `dim`.
struct tensor_split {
    int dim = -1;
    int parts = 1;
    int index = 0;
    int count = 1;
    [[nodiscard]] bool whole() const { return dim < 0; }
    friend bool operator==(const tensor_split&, const tensor_split&) = default;
};

struct parameter_info {
    std::string name;        // global (unsplit model) name, e.g. "blocks.3.fc1.weight"
    std::vector<int> shape;  // global (unsplit) shape
    std::size_t offset = 0;  // first element in the flat buffer
    std::size_t size = 0;    // number of elements this rank holds (product of local_shape())
    tensor_split split{};    // which part of the global tensor this rank holds

    friend bool operator==(const parameter_info&, const parameter_info&) = default;

    // Elements of the whole (global) tensor.
    [[nodiscard]] std::size_t global_size() const {
        std::size_t n = 1;
        for (int d : shape) n *= std::size_t(d);
        return n;
    }

    // The range of dimension split.dim that piece `split.index` takes inside one block.
    [[nodiscard]] index_range piece() const {
        if (split.whole()) return {0, 0};
        return split_range(shape[std::size_t(split.dim)] / split.parts, split.index, split.count);
    }

    // The shape of what this rank holds: the global shape, with dimension split.dim
    // shortened to parts * (its piece of one block).
    [[nodiscard]] std::vector<int> local_shape() const {
        std::vector<int> local = shape;
        if (!split.whole()) local[std::size_t(split.dim)] = split.parts * piece().size();
        return local;
    }

    // Calls fn(local_offset, global_offset, length) for maximal contiguous runs covering
    // this rank's elements once each, in increasing local order: local element
    // local_offset + j (row-major in local_shape(), relative to `offset`) is global element
    // global_offset + j (row-major in shape). A whole tensor is one run (0, 0, size).
    template <class F>
    void for_each_run(F&& fn) const {
        if (split.whole()) {
            fn(std::size_t(0), std::size_t(0), size);
            return;
        }
        const auto dim = std::size_t(split.dim);
        std::size_t outer = 1, inner = 1;
        for (std::size_t d = 0; d < dim; ++d) outer *= std::size_t(shape[d]);
        for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= std::size_t(shape[d]);
        const auto global_extent = std::size_t(shape[dim]);
        const auto block = global_extent / std::size_t(split.parts);
        const index_range p = piece();
        const auto width = std::size_t(p.size());
        const auto local_extent = width * std::size_t(split.parts);
        // Consecutive pieces that are also consecutive globally (count 1 would give
        // that, as would a split of the outermost dimension) are merged into one run.
        std::size_t run_local = 0, run_global = 0, run_length = 0;
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t b = 0; b < std::size_t(split.parts); ++b) {
                const std::size_t local = (o * local_extent + b * width) * inner;
                const std::size_t global = (o * global_extent + b * block + std::size_t(p.first)) * inner;
                const std::size_t length = width * inner;
                if (run_length > 0 && run_local + run_length == local && run_global + run_length == global) {
                    run_length += length;
                    continue;
                }
                if (run_length > 0) fn(run_local, run_global, run_length);
                run_local = local;
                run_global = global;
                run_length = length;
            }
        if (run_length > 0) fn(run_local, run_global, run_length);
    }
};

class parameter_registry {
public:
    // Appends a whole (unsplit) tensor after the last one; returns its offset in the flat buffer.
    std::size_t add(std::string name, std::vector<int> shape) { return add(std::move(name), std::move(shape), {}); }

    // Appends this rank's part of a tensor of GLOBAL shape `shape`, held as `split` says;
    // returns its offset in the flat buffer. A split over one rank (count 1) is stored as
    // the whole tensor, so tensor parallelism of degree 1 changes nothing.
    std::size_t add(std::string name, std::vector<int> shape, tensor_split split) {
        require(!name.empty(), "parameter name", name, "must not be empty");
        require(!shape.empty(), "shape of " + name, shape.size(), "must have at least one dimension");
        for (int d : shape) require(d > 0, "shape of " + name + " (a dimension)", d, "must be positive");
        if (split.count == 1 && split.index == 0) split = tensor_split{};
        if (!split.whole()) check_split(name, shape, split);
        if (index_.contains(name))
            throw invalid_argument("parameter name", name, "is already registered");
        parameter_info info{std::move(name), std::move(shape), total_size_, 0, split};
        info.size = 1;
        for (int d : info.local_shape()) info.size *= std::size_t(d);
        index_.emplace(info.name, entries_.size());
        total_size_ += info.size;
        entries_.push_back(std::move(info));
        return entries_.back().offset;
    }

    [[nodiscard]] std::span<const parameter_info> entries() const { return entries_; }
    [[nodiscard]] std::size_t total_size() const { return total_size_; }
    [[nodiscard]] bool contains(std::string_view name) const {
        return index_.contains(std::string(name));
    }

    // Same tensors, shapes, splits and offsets, in the same order.
    friend bool operator==(const parameter_registry& a, const parameter_registry& b) {
        return a.entries_ == b.entries_;
    }

    [[nodiscard]] const parameter_info& find(std::string_view name) const {
        const auto it = index_.find(std::string(name));
        if (it == index_.end())
            throw invalid_argument("parameter name", name,
                                   "is not registered (see parameter_registry::entries())");
        return entries_[it->second];
    }

private:
    static void check_split(const std::string& name, const std::vector<int>& shape, const tensor_split& split) {
        const std::string what = "split of " + name;
        require(split.dim >= 0 && split.dim < int(shape.size()), what + ": dim", split.dim,
                "must be -1 (whole tensor) or a dimension in [0, " + std::to_string(shape.size()) + ")");
        const int extent = shape[std::size_t(split.dim)];
        require(split.parts >= 1 && extent % split.parts == 0, what + ": parts", split.parts,
                "must be at least 1 and divide dimension " + std::to_string(split.dim) + " = " +
                    std::to_string(extent));
        require(split.count >= 1, what + ": count", split.count, "must be at least 1");
        require(split.index >= 0 && split.index < split.count, what + ": index", split.index,
                "must be in [0, count = " + std::to_string(split.count) + ")");
        require(split.count <= extent / split.parts, what + ": count", split.count,
                "must be at most the block extent " + std::to_string(extent / split.parts) +
                    " (dimension " + std::to_string(split.dim) + " = " + std::to_string(extent) + " in " +
                    std::to_string(split.parts) + " blocks) so that every rank holds a non-empty piece");
    }

    std::vector<parameter_info> entries_;
    std::unordered_map<std::string, std::size_t> index_;
    std::size_t total_size_ = 0;
};

}  // namespace weft
