// Finite-difference checks, in double, of every layer's input and weight gradients.
#include <catch2/catch.hpp>

#include <vector>

#include "cpu_backends.hpp"
#include "test_support.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/gelu.hpp"
#include "weft/nn/layer_norm.hpp"
#include "weft/nn/linear.hpp"

using backend = weft::exec::cpu_backend<double>;
using matrix = backend::matrix;
using weft_test::check_gradient;
using weft_test::cpu64;
using weft_test::flat;
using weft_test::random_matrix;

namespace {

// Loss = sum(y .* r), so the upstream gradient is r.
double dot(const matrix& y, const matrix& r) { return y.cwiseProduct(r).sum(); }

}  // namespace

TEST_CASE("linear: input, weight and bias gradients", "[nn][gradient]") {
    weft::parameter_registry registry;
    registry.add("unrelated", {3});  // the layer must honour its offsets
    const weft::nn::linear<backend> layer(registry, "fc", 4, 3);
    std::vector<double> params(registry.total_size());
    layer.initialize(params, 7);
    for (std::size_t i = 0; i < params.size(); ++i) params[i] += 0.1 * weft::rng::normal(5, "bias", i);
    matrix x = random_matrix<matrix>(5, 4, "x");
    const matrix r = random_matrix<matrix>(5, 3, "r");
    auto loss = [&] { return dot(layer.forward(cpu64, std::span<const double>(params), x), r); };

    matrix dx = layer.backward_input(cpu64, std::span<const double>(params), r);
    std::vector<double> grads(registry.total_size(), 0.0);
    layer.backward_weight(cpu64, grads, x, r);
    const matrix dx_copy = dx;
    check_gradient(flat(x), flat(dx), loss, "dx");
    check_gradient(params, grads, loss, "dparams");
    CHECK(grads[0] == 0.0);  // the unrelated tensor is untouched
    CHECK(dx == dx_copy);
}

TEST_CASE("layer norm: input, weight and bias gradients", "[nn][gradient]") {
    weft::parameter_registry registry;
    const weft::nn::layer_norm<backend> layer(registry, "ln", 6);
    std::vector<double> params(registry.total_size());
    for (std::size_t i = 0; i < params.size(); ++i) params[i] = 1.0 + 0.5 * weft::rng::normal(3, "ln", i);
    matrix x = random_matrix<matrix>(4, 6, "x", 2.0);
    const matrix r = random_matrix<matrix>(4, 6, "r");
    auto loss = [&] {
        matrix mean, rstd;
        return dot(layer.forward(cpu64, std::span<const double>(params), x, mean, rstd), r);
    };
    matrix mean, rstd;
    (void)layer.forward(cpu64, std::span<const double>(params), x, mean, rstd);
    const matrix dx = layer.backward_input(cpu64, std::span<const double>(params), x, mean, rstd, r);
    std::vector<double> grads(registry.total_size(), 0.0);
    layer.backward_weight(cpu64, grads, x, mean, rstd, r);
    check_gradient(flat(x), std::span<const double>(dx.data(), std::size_t(dx.size())), loss, "dx");
    check_gradient(params, grads, loss, "dparams");
}

TEST_CASE("layer norm initializes to the identity normalization", "[nn]") {
    weft::parameter_registry registry;
    const weft::nn::layer_norm<backend> layer(registry, "ln", 3);
    std::vector<double> params(registry.total_size(), 42.0);
    layer.initialize(params);
    CHECK(params == std::vector<double>{1, 1, 1, 0, 0, 0});
}

TEST_CASE("gelu: input gradient", "[nn][gradient]") {
    matrix x = random_matrix<matrix>(3, 5, "x", 2.0);
    const matrix r = random_matrix<matrix>(3, 5, "r");
    const matrix dx = weft::nn::gelu<backend>::backward_input(cpu64, x, r);
    check_gradient(flat(x), std::span<const double>(dx.data(), std::size_t(dx.size())),
                   [&] { return dot(weft::nn::gelu<backend>::forward(cpu64, x), r); }, "dx");
}

TEST_CASE("cross entropy: gradient of the mean loss, scaled", "[nn][gradient]") {
    matrix logits = random_matrix<matrix>(4, 5, "logits", 3.0);
    const std::vector<std::int32_t> labels{0, 4, 2, 2};
    const double scale = 0.25;
    const auto result = weft::nn::cross_entropy(cpu64, logits, labels, scale);
    const matrix expected_grad = result.dlogits / scale;
    check_gradient(flat(logits), std::span<const double>(expected_grad.data(), std::size_t(expected_grad.size())),
                   [&] { return weft::nn::cross_entropy(cpu64, logits, labels).loss; }, "dlogits");
    CHECK_THROWS_AS(weft::nn::cross_entropy(cpu64, logits, labels, std::nan("")), weft::error);
}
