// A non-owning, row-major view of a dense tensor of rank 1 to 4.
// Flat buffers (parameters, gradients, messages) are handed around as views, so
// the code that slices them never owns or copies memory by accident.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>

#include "weft/core/error.hpp"

namespace weft {

inline constexpr std::size_t max_tensor_rank = 4;

template <class T>
class tensor_view {
public:
    using element_type = T;

    constexpr tensor_view() = default;

    // A view of `data` with the given shape; the shape must cover data exactly.
    constexpr tensor_view(std::span<T> data, std::initializer_list<std::size_t> shape) : data_(data) {
        require(shape.size() >= 1 && shape.size() <= max_tensor_rank, "shape rank", shape.size(),
                "a tensor view has 1 to 4 dimensions");
        std::size_t elements = 1;
        for (const std::size_t extent : shape) {
            extents_[rank_++] = extent;
            elements *= extent;
        }
        require(elements == data.size(), "shape element count", elements,
                "the product of the shape must equal the buffer size " + std::to_string(data.size()));
    }

    [[nodiscard]] constexpr std::size_t rank() const { return rank_; }
    [[nodiscard]] constexpr std::size_t extent(std::size_t dim) const {
        require(dim < rank_, "dim", dim, "must be below the view's rank " + std::to_string(rank_));
        return extents_[dim];
    }
    [[nodiscard]] constexpr std::size_t size() const { return data_.size(); }
    [[nodiscard]] constexpr T* data() const { return data_.data(); }
    [[nodiscard]] constexpr std::span<T> span() const { return data_; }

    // Treats dimensions 0..rank-2 as rows and the last one as columns.
    [[nodiscard]] constexpr std::size_t cols() const { return rank_ == 0 ? 0 : extents_[rank_ - 1]; }
    [[nodiscard]] constexpr std::size_t rows() const { return cols() == 0 ? 0 : size() / cols(); }

    [[nodiscard]] constexpr T& operator()(std::size_t row, std::size_t col) const {
        return data_[row * cols() + col];
    }

    // Rows [first, first + count) of a 2-D interpretation, as a new view.
    [[nodiscard]] constexpr tensor_view row_slice(std::size_t first, std::size_t count) const {
        require(first + count <= rows(), "row range end", first + count,
                "must not exceed the view's " + std::to_string(rows()) + " rows");
        return tensor_view(data_.subspan(first * cols(), count * cols()), {count, cols()});
    }

private:
    std::span<T> data_{};
    std::array<std::size_t, max_tensor_rank> extents_{};
    std::size_t rank_ = 0;
};

}  // namespace weft
