// What a step learns from its reduced gradients before the update: their part of the global
// gradient norm (the sum of squares of the elements this rank counts) and whether they are
// all finite (the non-finite guard). train/grad_norm.hpp says which elements a rank counts;
// this is the host's pass over them. A compute backend with optimizer kernels
// (exec/compute_backend.hpp) gives the same summary of buffers where they live.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::optim {

// An interval [first, last) of a stage's flat buffer.
struct flat_run {
    std::size_t first = 0;
    std::size_t last = 0;
    friend bool operator==(const flat_run&, const flat_run&) = default;
};

struct gradient_summary {
    double sum_of_squares = 0;  // over the counted runs, in double
    bool finite = true;         // every owned element, counted or not
};

// The sum of squares of the counted elements of `owned`, which holds the flat buffer's
// elements [offset, offset + owned.size()) (a ZeRO range, or the whole stage at offset 0).
// In double: the norm of millions of float gradients keeps its digits.
template <class Scalar>
[[nodiscard]] double counted_sum_of_squares(std::span<const Scalar> owned, std::size_t offset,
                                            std::span<const flat_run> runs) {
    double sum = 0;
    const std::size_t end = offset + owned.size();
    for (const auto& run : runs) {
        const std::size_t first = std::max(run.first, offset);
        const std::size_t last = std::min(run.last, end);
        for (std::size_t i = first; i < last; ++i) {
            const double g = owned[i - offset];
            sum += g * g;
        }
    }
    return sum;
}

template <class Scalar>
[[nodiscard]] bool all_finite(std::span<const Scalar> values) {
    // One branch-free pass: v * 0 is 0 for a finite v and NaN for a NaN or an infinity, and
    // a NaN survives the sum.
    Scalar sum{0};
    for (const Scalar v : values) sum += v * Scalar(0);
    return std::isfinite(sum);
}

template <class Scalar>
[[nodiscard]] gradient_summary summarize_gradients_on_host(std::span<const Scalar> owned, std::size_t offset,
                                                           std::span<const flat_run> counted) {
    return {.sum_of_squares = counted_sum_of_squares(owned, offset, counted), .finite = all_finite(owned)};
}

}  // namespace weft::optim
