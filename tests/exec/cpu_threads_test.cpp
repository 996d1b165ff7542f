// The CPU kernels on several threads (--threads) compute what they compute on one, bit for bit,
// at a GPT's shapes (rows that do not divide among the threads included), and the pool under
// them covers every piece once and reports a failing part.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "weft/exec/cpu.hpp"
#include "weft/exec/cpu_thread_pool.hpp"

namespace {

using threaded_backend = weft::exec::cpu_backend<float>;
using threaded_matrix = threaded_backend::matrix;

threaded_matrix random_threaded_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed) {
    std::mt19937 draw(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    threaded_matrix m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(draw);
    return m;
}
std::vector<float> random_threaded_vector(std::size_t n, std::uint32_t seed) {
    const threaded_matrix m = random_threaded_matrix(1, Eigen::Index(n), seed);
    return {m.data(), m.data() + n};
}
// Bit for bit: == on floats also holds for -0 == 0, so the bytes are compared.
bool bitwise_identical(const threaded_matrix& a, const threaded_matrix& b) {
    return a.rows() == b.rows() && a.cols() == b.cols() &&
           std::memcmp(a.data(), b.data(), sizeof(float) * std::size_t(a.size())) == 0;
}
bool bitwise_identical(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

}  // namespace

TEST_CASE("the pool covers every piece once, in parts fixed by the count", "[exec][cpu][threads]") {
    weft::exec::cpu_thread_pool pool(3);
    for (const std::size_t count : {0u, 1u, 5u, 7u, 64u, 1000u}) {
        std::vector<std::atomic<int>> seen(count);
        std::atomic<int> parts{0};
        pool.for_parts(count, 2, [&](std::size_t begin, std::size_t end) {
            ++parts;
            for (std::size_t i = begin; i < end; ++i) ++seen[i];
        });
        for (std::size_t i = 0; i < count; ++i) CHECK(seen[i] == 1);
        CHECK(std::size_t(parts.load()) == (count == 0 ? 0 : pool.parts_for(count, 2)));
    }
    CHECK(pool.parts_for(5, 2) == 2);  // no part below the grain
    CHECK(pool.parts_for(1000, 2) == 3);
}

TEST_CASE("a failing part is reported after every part has finished", "[exec][cpu][threads]") {
    weft::exec::cpu_thread_pool pool(4);
    std::atomic<int> finished{0};
    CHECK_THROWS_WITH(pool.for_parts(400, 1,
                                     [&](std::size_t begin, std::size_t) {
                                         if (begin == 100) throw std::runtime_error("part 1 failed");
                                         ++finished;
                                     }),
                      "part 1 failed");
    CHECK(finished == 3);
    // The pool is whole afterwards.
    std::atomic<int> after{0};
    pool.for_parts(400, 1, [&](std::size_t begin, std::size_t end) { after += int(end - begin); });
    CHECK(after == 400);
}

TEST_CASE("callers on several threads take turns on one pool", "[exec][cpu][threads]") {
    weft::exec::cpu_thread_pool pool(2);
    std::vector<std::thread> callers;
    std::atomic<long> total{0};
    for (int c = 0; c < 3; ++c)
        callers.emplace_back([&] {
            for (int job = 0; job < 50; ++job)
                pool.for_parts(64, 1, [&](std::size_t begin, std::size_t end) { total += long(end - begin); });
        });
    for (auto& caller : callers) caller.join();
    CHECK(total == 3L * 50 * 64);
}

TEST_CASE("a thread count outside [1, 1024] is refused by name", "[exec][cpu][threads]") {
    CHECK_THROWS_WITH(weft::exec::cpu_thread_pool(0), Catch::Contains("--threads = 0 is invalid"));
    threaded_backend backend;
    CHECK_THROWS_WITH(backend.set_threads(2000), Catch::Contains("--threads = 2000 is invalid: must be an integer in [1, 1024]"));
    CHECK(backend.threads() == 1);
}

namespace {
struct threaded_gpt_shape {
    int rows, width, hidden, vocab, seq, heads;
};
}  // namespace

TEST_CASE("every threaded kernel equals its one-thread result bit for bit", "[exec][cpu][threads]") {
    const threaded_backend one;
    const threaded_backend three(3);
    REQUIRE(three.threads() == 3);
    // A GPT micro-batch of 3 sequences of 67 tokens (201 rows: no even split), width 96,
    // 4 heads, an MLP of 4x, a vocabulary of 333; and the examples' tests' tiny GPT, whose
    // products are below the sizes where Eigen blocks its GEMMs.
    const auto shape = GENERATE(threaded_gpt_shape{201, 96, 384, 333, 67, 4}, threaded_gpt_shape{32, 32, 128, 256, 16, 2});
    const int rows = shape.rows, width = shape.width, hidden = shape.hidden, vocab = shape.vocab, seq = shape.seq,
              heads = shape.heads;
    const threaded_matrix x = random_threaded_matrix(rows, width, 1);
    const auto w = random_threaded_vector(std::size_t(width) * hidden, 2);
    const auto b = random_threaded_vector(hidden, 3);
    const threaded_matrix dy = random_threaded_matrix(rows, hidden, 4);

    CHECK(bitwise_identical(one.add(x, x * 0.5f), three.add(x, x * 0.5f)));
    CHECK(bitwise_identical(one.linear_forward(x, w, b, width, hidden), three.linear_forward(x, w, b, width, hidden)));
    CHECK(bitwise_identical(one.linear_backward_input(dy, w, width, hidden), three.linear_backward_input(dy, w, width, hidden)));
    {
        std::vector<float> dw1(w.size(), 0.25f), db1(b.size(), 0.5f), dw3 = dw1, db3 = db1;
        one.linear_backward_weight(x, dy, dw1, db1);
        three.linear_backward_weight(x, dy, dw3, db3);
        CHECK(bitwise_identical(dw1, dw3));
        CHECK(bitwise_identical(db1, db3));
    }
    CHECK(bitwise_identical(one.gelu_forward(dy), three.gelu_forward(dy)));
    CHECK(bitwise_identical(one.gelu_backward(dy, dy * 0.1f), three.gelu_backward(dy, dy * 0.1f)));
    {
        const auto gamma = random_threaded_vector(width, 5), beta = random_threaded_vector(width, 6);
        threaded_matrix mean1, rstd1, mean3, rstd3;
        const threaded_matrix y1 = one.layer_norm_forward(x, gamma, beta, 1e-5f, mean1, rstd1);
        const threaded_matrix y3 = three.layer_norm_forward(x, gamma, beta, 1e-5f, mean3, rstd3);
        CHECK(bitwise_identical(y1, y3));
        CHECK(bitwise_identical(mean1, mean3));
        CHECK(bitwise_identical(rstd1, rstd3));
        const threaded_matrix g = random_threaded_matrix(rows, width, 7);
        CHECK(bitwise_identical(one.layer_norm_backward_input(x, mean1, rstd1, gamma, g),
                        three.layer_norm_backward_input(x, mean1, rstd1, gamma, g)));
        std::vector<float> dg1(width, 1.0f), db1(width, -1.0f), dg3 = dg1, db3 = db1;
        one.layer_norm_backward_weight(x, mean1, rstd1, g, dg1, db1);
        three.layer_norm_backward_weight(x, mean1, rstd1, g, dg3, db3);
        CHECK(bitwise_identical(dg1, dg3));
        CHECK(bitwise_identical(db1, db3));
    }
    {
        const auto wte = random_threaded_vector(std::size_t(vocab) * width, 8);
        const threaded_matrix logits1 = one.transposed_linear_forward(x, wte, vocab, width);
        CHECK(bitwise_identical(logits1, three.transposed_linear_forward(x, wte, vocab, width)));
        const threaded_matrix dl = random_threaded_matrix(rows, vocab, 9);
        CHECK(bitwise_identical(one.transposed_linear_backward_input(dl, wte, vocab, width),
                        three.transposed_linear_backward_input(dl, wte, vocab, width)));
        std::vector<float> dw1(wte.size(), 0.125f), dw3 = dw1;
        one.transposed_linear_backward_weight(x, dl, dw1);
        three.transposed_linear_backward_weight(x, dl, dw3);
        CHECK(bitwise_identical(dw1, dw3));
        std::vector<std::int32_t> labels(rows);
        for (int r = 0; r < rows; ++r) labels[std::size_t(r)] = (r * 37) % vocab;
        threaded_matrix d1, d3;
        const float loss1 = one.cross_entropy(logits1, labels, 0.5f, d1);
        const float loss3 = three.cross_entropy(logits1, labels, 0.5f, d3);
        CHECK(std::memcmp(&loss1, &loss3, sizeof loss1) == 0);
        CHECK(bitwise_identical(d1, d3));
    }
    {
        const threaded_matrix qkv = random_threaded_matrix(rows, 3 * width, 10);
        threaded_matrix probs1, probs3;
        CHECK(bitwise_identical(one.causal_attention_forward(qkv, seq, heads, probs1),
                        three.causal_attention_forward(qkv, seq, heads, probs3)));
        CHECK(bitwise_identical(probs1, probs3));
        const threaded_matrix g = random_threaded_matrix(rows, width, 11);
        CHECK(bitwise_identical(one.causal_attention_backward(qkv, probs1, g, seq, heads),
                        three.causal_attention_backward(qkv, probs1, g, seq, heads)));
    }
    {
        auto p1 = random_threaded_vector(10000, 12), m1 = random_threaded_vector(10000, 13), v1 = random_threaded_vector(10000, 14);
        for (auto& value : v1) value = value * value;
        const auto g = random_threaded_vector(10000, 15);
        auto p3 = p1, m3 = m1, v3 = v1;
        const auto f = weft::optim::adamw_factors<float>::of_step(
            {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1}, 3, 0.5f);
        one.adamw_update(p1, g, m1, v1, f, true);
        three.adamw_update(p3, g, m3, v3, f, true);
        CHECK(bitwise_identical(p1, p3));
        CHECK(bitwise_identical(m1, m3));
        CHECK(bitwise_identical(v1, v3));
    }
}
