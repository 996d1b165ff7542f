// Helpers shared by the nn tests: deterministic random matrices and a central
// finite-difference gradient check in double precision.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "shared_backend.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/core/rng.hpp"

namespace weft_test {

template <class Matrix>
Matrix random_matrix(int rows, int cols, std::string_view tag, double scale = 1.0) {
    Matrix m(rows, cols);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            m(r, c) = typename Matrix::Scalar(
                scale * weft::rng::normal(99, tag, std::uint64_t(r) * std::uint64_t(cols) + std::uint64_t(c)));
    return m;
}

// Perturbs every element of `values` in turn and compares (f(+h) - f(-h)) / 2h with
// `analytic`, to ~1e-6 relative. `values` is restored afterwards.
inline void check_gradient(std::span<double> values, std::span<const double> analytic,
                           const std::function<double()>& f, const std::string& what) {
    REQUIRE(values.size() == analytic.size());
    constexpr double h = 1e-5;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const double saved = values[i];
        values[i] = saved + h;
        const double up = f();
        values[i] = saved - h;
        const double down = f();
        values[i] = saved;
        const double numeric = (up - down) / (2 * h);
        const double tolerance = 1e-6 * std::max(std::abs(numeric), std::abs(analytic[i])) + 1e-9;
        INFO(what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric);
        CHECK(std::abs(analytic[i] - numeric) <= tolerance);
    }
}

template <class Matrix>
std::span<double> flat(Matrix& m) {
    return {m.data(), std::size_t(m.size())};
}

// A stage type's static layout() equals the registry the stage builds: the same tensors in
// the same order, with the same shapes, slices, sizes and offsets.
inline void check_same_layout(const weft::parameter_registry& layout, const weft::parameter_registry& built) {
    REQUIRE(layout.entries().size() == built.entries().size());
    for (std::size_t i = 0; i < built.entries().size(); ++i) {
        const auto& l = layout.entries()[i];
        const auto& b = built.entries()[i];
        INFO(b.name);
        CHECK(l.name == b.name);
        CHECK(l.shape == b.shape);
        CHECK(l.offset == b.offset);
        CHECK(l.size == b.size);
        CHECK(l.split == b.split);
    }
    CHECK(layout.total_size() == built.total_size());
}

}  // namespace weft_test
