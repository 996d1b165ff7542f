// The CPU kernels against values worked out by hand, and their input checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "weft/exec/cpu.hpp"

using backend_type = weft::exec::cpu_backend<double>;
using matrix = backend_type::matrix;
const backend_type backend;

TEST_CASE("linear forward and both backward halves", "[exec][cpu]") {
    matrix x(2, 3);
    x << 1, 2, 3,
         4, 5, 6;
    const std::vector<double> w{1, 0, 0, 1, 1, 1};  // [3, 2] row-major
    const std::vector<double> b{0.5, -1};
    const matrix y = backend.linear_forward(x, w, b, 3, 2);
    matrix expected(2, 2);
    expected << 1 + 3 + 0.5, 2 + 3 - 1,
                4 + 6 + 0.5, 5 + 6 - 1;
    CHECK(y == expected);
    // An empty bias is no bias (a row-parallel layer adds its own after the reduction).
    matrix unbiased(2, 2);
    unbiased << 1 + 3, 2 + 3,
                4 + 6, 5 + 6;
    CHECK(backend.linear_forward(x, w, {}, 3, 2) == unbiased);

    matrix dy(2, 2);
    dy << 1, 2,
          3, 4;
    matrix dx_expected(2, 3);
    dx_expected << 1, 2, 3,
                   3, 4, 7;
    CHECK(backend.linear_backward_input(dy, w, 3, 2) == dx_expected);

    std::vector<double> dw(6, 1.0), db(2, 1.0);  // accumulates onto what is there
    backend.linear_backward_weight(x, dy, dw, db);
    CHECK(dw == std::vector<double>{1 + 13, 1 + 18, 1 + 17, 1 + 24, 1 + 21, 1 + 30});
    CHECK(db == std::vector<double>{1 + 4, 1 + 6});
}

TEST_CASE("linear kernels reject mismatched shapes", "[exec][cpu]") {
    const matrix x = matrix::Ones(2, 3);
    std::vector<double> w(6), b(2), wrong(5);
    CHECK_THROWS_AS(backend.linear_forward(x, w, b, 4, 2), weft::error);
    CHECK_THROWS_AS(backend.linear_forward(x, wrong, b, 3, 2), weft::error);
    CHECK_THROWS_WITH(backend.linear_forward(x, w, wrong, 3, 2),
                      Catch::Contains("bias size") && Catch::Contains("must equal 2"));
    CHECK_THROWS_AS(backend.linear_backward_input(matrix::Ones(2, 3), w, 3, 2), weft::error);
    CHECK_THROWS_AS(backend.linear_backward_weight(x, matrix::Ones(3, 2), w, b), weft::error);
}

TEST_CASE("gelu matches the tanh formula and its derivative", "[exec][cpu]") {
    matrix x(1, 3);
    x << 0, 1, -2;
    const matrix y = backend.gelu_forward(x);
    CHECK(y(0, 0) == 0.0);
    CHECK(y(0, 1) == Approx(0.8411919906082768).epsilon(1e-12));
    CHECK(y(0, 2) == Approx(-0.04540230591222).epsilon(1e-9));
    const matrix d = backend.gelu_backward(x, matrix::Ones(1, 3));
    CHECK(d(0, 0) == Approx(0.5).epsilon(1e-12));
    CHECK(d(0, 1) == Approx(1.0829640838457826).epsilon(1e-9));
}

TEST_CASE("layer norm normalizes rows and saves their statistics", "[exec][cpu]") {
    matrix x(2, 4);
    x << 1, 2, 3, 4,
         -1, -1, 1, 1;
    const std::vector<double> gamma{1, 1, 2, 2}, beta{0, 0, 0, 1};
    matrix mean, rstd;
    const matrix y = backend.layer_norm_forward(x, gamma, beta, 0.0, mean, rstd);
    CHECK(mean(0, 0) == 2.5);
    CHECK(mean(1, 0) == 0.0);
    CHECK(rstd(0, 0) == Approx(1 / std::sqrt(1.25)).epsilon(1e-14));
    CHECK(rstd(1, 0) == Approx(1.0).epsilon(1e-14));
    CHECK(y(1, 0) == Approx(-1.0));
    CHECK(y(1, 2) == Approx(2.0));
    CHECK(y(1, 3) == Approx(3.0));

    // With gamma = 1 the input gradient of a constant upstream gradient is zero:
    // shifting all features of a row does not change a normalized output.
    const std::vector<double> ones(4, 1.0);
    const matrix dx = backend.layer_norm_backward_input(x, mean, rstd, ones, matrix::Ones(2, 4));
    CHECK(dx.cwiseAbs().maxCoeff() < 1e-12);

    std::vector<double> dgamma(4, 0.0), dbeta(4, 0.0);
    backend.layer_norm_backward_weight(x, mean, rstd, matrix::Ones(2, 4), dgamma, dbeta);
    CHECK(dbeta == std::vector<double>{2, 2, 2, 2});
    CHECK(dgamma[3] == Approx(1.5 / std::sqrt(1.25) + 1.0));
}

TEST_CASE("cross entropy: mean loss, scaled gradient, label checks", "[exec][cpu]") {
    matrix logits = matrix::Zero(2, 4);
    logits(1, 2) = 1000;  // large values must not overflow
    const std::vector<std::int32_t> labels{1, 2};
    matrix d;
    const double loss = backend.cross_entropy(logits, labels, 0.5, d);
    CHECK(loss == Approx(std::log(4.0) / 2).epsilon(1e-12));
    CHECK(d(0, 1) == Approx(0.5 * (0.25 - 1) / 2));
    CHECK(d(0, 0) == Approx(0.5 * 0.25 / 2));
    CHECK(std::abs(d(1, 2)) < 1e-12);
    CHECK(std::abs(d.row(0).sum()) < 1e-15);

    CHECK_THROWS_WITH(backend.cross_entropy(logits, std::vector<std::int32_t>{1, 4}, 1.0, d),
                      Catch::Contains("labels[1]") && Catch::Contains("[0, 4)"));
    CHECK_THROWS_AS(backend.cross_entropy(logits, std::vector<std::int32_t>{-1, 0}, 1.0, d),
                    weft::error);
    CHECK_THROWS_WITH(backend.cross_entropy(logits, std::vector<std::int32_t>{1}, 1.0, d),
                      Catch::Contains("labels.size()"));
}

TEST_CASE("the optimizer kernels are the host's optimizer code", "[exec][cpu]") {
    // exec::optimizer_kernels on the CPU: the engine's step runs them, so they must be what
    // optim:: computes on the host, bit for bit.
    const weft::exec::cpu floats;
    std::vector<float> p{1.0f, -0.5f, 0.25f, 2.0f}, m{0.1f, 0, -0.2f, 0}, v{0.01f, 0, 0.04f, 0};
    const std::vector<float> g{0.5f, -0.25f, 0.1f, 3.0f};
    auto p2 = p, m2 = m, v2 = v;
    const auto f = weft::optim::adamw_factors<float>::of_step({.lr = 0.1, .weight_decay = 0.1}, 3, 0.5f);
    floats.adamw_update(p, g, m, v, f, true);
    weft::optim::adamw_update_on_host<float>(p2, g, m2, v2, f, true);
    CHECK(p == p2);
    CHECK(m == m2);
    CHECK(v == v2);
    CHECK(p[0] != 1.0f);

    // SGD with momentum: a first step (the buffer takes the gradient) and a later one.
    for (const bool first : {true, false}) {
        std::vector<float> q{1.0f, -0.5f, 0.25f, 2.0f}, buffer{0.3f, 0, -0.1f, 1.0f};
        auto q2 = q, buffer2 = buffer;
        const weft::optim::sgd_factors<float> s{
            .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .grad_scale = 0.5f, .use_momentum = true,
            .first_step = first};
        floats.sgd_update(q, g, buffer, s, true);
        weft::optim::sgd_update_on_host<float>(q2, g, buffer2, s, true);
        CHECK(q == q2);
        CHECK(buffer == buffer2);
        CHECK(q[0] != 1.0f);
    }

    // The averaging: a multiplication, rounded as the host's.
    std::vector<float> summed{3.0f, -1.5f, 0.1f, 7.0f}, expected = summed;
    floats.scale(summed, 1.0f / 3.0f);
    for (float& x : expected) x *= 1.0f / 3.0f;
    CHECK(summed == expected);
    CHECK(summed[0] == 1.0f);

    // Owned elements [10, 14) of a stage; counted runs [9, 11) and [12, 20): elements 10, 12, 13.
    const std::vector<weft::optim::flat_run> runs{{9, 11}, {12, 20}};
    std::vector<float> owned{1, 2, 3, 4};
    auto summary = floats.summarize_gradients(owned, 10, runs);
    CHECK(summary.sum_of_squares == 1.0 + 9.0 + 16.0);
    CHECK(summary.finite);
    owned[1] = std::nanf("");  // not counted, still checked
    summary = floats.summarize_gradients(owned, 10, runs);
    CHECK(summary.sum_of_squares == 26.0);
    CHECK_FALSE(summary.finite);
    owned[1] = 2;
    owned[3] = -INFINITY;
    CHECK_FALSE(floats.summarize_gradients(owned, 10, runs).finite);
}
