// The CPU kernels against values worked out by hand, and their input checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "weft/exec/cpu.hpp"
#include "weft/exec/cpu_gemm_rate.hpp"

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

TEST_CASE("the vocabulary-parallel embedding kernels are the whole-vocabulary ones over a slice of rows",
          "[exec][cpu]") {
    constexpr int vocab = 5, width = 3, seq_len = 2;
    const std::vector<std::int32_t> tokens{4, 1, 1, 3, 0, 4};  // three sequences
    std::vector<double> wte(vocab * width), wpe(seq_len * width);
    for (std::size_t i = 0; i < wte.size(); ++i) wte[i] = 0.1 * double(i) - 0.7;
    for (std::size_t i = 0; i < wpe.size(); ++i) wpe[i] = 0.01 * double(i * i) + 0.3;
    const matrix whole = backend.embedding_forward(tokens, wte, wpe, vocab, width, seq_len);

    // Rows [1, 4) of 5: tokens 1, 1 and 3 are held, 4, 0 and 4 are another rank's.
    constexpr int first_row = 1, held = 3;
    const std::span<const double> slice(wte.data() + first_row * width, held * width);
    int sums = 0;
    matrix before_sum;
    const auto record = [&](std::span<double> v) {
        ++sums;
        before_sum = Eigen::Map<const matrix>(v.data(), Eigen::Index(tokens.size()), width);
    };
    const matrix mine = backend.vocab_parallel_embedding_forward(tokens, slice, first_row, wpe, width, seq_len, record);
    CHECK(sums == 1);
    for (std::size_t n = 0; n < tokens.size(); ++n) {
        INFO("row " << n << ", token " << tokens[n]);
        const bool held_row = tokens[n] >= first_row && tokens[n] < first_row + held;
        for (int c = 0; c < width; ++c) {
            const double lookup = held_row ? wte[std::size_t(tokens[n]) * width + std::size_t(c)] : 0.0;
            CHECK(before_sum(Eigen::Index(n), c) == lookup);
            // Without the other rank's rows (a sum that leaves its input), wpe is added to zeros.
            CHECK(mine(Eigen::Index(n), c) == lookup + wpe[(n % seq_len) * width + std::size_t(c)]);
        }
    }
    // One slice of all the rows, summed over a group of one: the whole lookup, exactly.
    const matrix all = backend.vocab_parallel_embedding_forward(tokens, wte, 0, wpe, width, seq_len,
                                                                [](std::span<double>) {});
    CHECK(all == whole);

    // Backward over slices [0, 2) and [2, 5): each writes its rows of the whole gradient and
    // the whole position gradient, bit for bit.
    matrix dy(Eigen::Index(tokens.size()), width);
    for (Eigen::Index i = 0; i < dy.size(); ++i) dy.data()[i] = 0.25 * double(i % 7) - 0.5;
    std::vector<double> dwte(wte.size(), 1.0), dwpe(wpe.size(), 2.0);
    backend.embedding_backward_weight(tokens, dy, dwte, dwpe, vocab, seq_len);
    std::vector<double> parts(wte.size(), 1.0);
    for (const auto& [first, last] : {std::pair{0, 2}, std::pair{2, 5}}) {
        INFO("rows [" << first << ", " << last << ")");
        std::vector<double> part_dwpe(wpe.size(), 2.0);
        backend.vocab_parallel_embedding_backward_weight(
            tokens, dy, std::span<double>(parts.data() + first * width, std::size_t(last - first) * width), first,
            part_dwpe, seq_len);
        CHECK(part_dwpe == dwpe);
    }
    CHECK(parts == dwte);
    CHECK(dwte[0] != 1.0);  // token 0 was seen

    CHECK_THROWS_WITH(backend.vocab_parallel_embedding_forward(tokens, slice.first(4), first_row, wpe, width, seq_len,
                                                               [](std::span<double>) {}),
                      Catch::Contains("vocab_parallel_embedding_forward: wte size") &&
                          Catch::Contains("whole number of rows of width 3"));
    CHECK_THROWS_WITH(backend.vocab_parallel_embedding_backward_weight(tokens, dy, parts, -1, dwpe, seq_len),
                      Catch::Contains("embedding_backward_weight: first_row") && Catch::Contains("-1"));
}

TEST_CASE("the CPU GEMM rate measures a positive rate and refuses sizes and rounds below 1", "[exec][cpu]") {
    const double gflops = weft::exec::measure_cpu_gemm_gflops(64, 2, 0.001);
    CHECK(std::isfinite(gflops));
    CHECK(gflops > 0);
    CHECK_THROWS_WITH(weft::exec::measure_cpu_gemm_gflops(64, 2, -1),
                      Catch::Contains("min_round_seconds = -1 is invalid") && Catch::Contains("between 0 and 10"));
    CHECK_THROWS_WITH(weft::exec::measure_cpu_gemm_gflops(0, 2),
                      Catch::Contains("size = 0 is invalid") && Catch::Contains("must be at least 1"));
    CHECK_THROWS_WITH(weft::exec::measure_cpu_gemm_gflops(64, 0),
                      Catch::Contains("rounds = 0 is invalid") && Catch::Contains("must be at least 1"));
}
