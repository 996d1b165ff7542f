// Finite-difference checks, in double, of the GPT layers' input and weight gradients:
// embedding, the causal attention kernel and layer, the transformer block, the tied head.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "cpu_backends.hpp"
#include "test_support.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/attention.hpp"
#include "weft/nn/embedding.hpp"
#include "weft/nn/lm_head.hpp"
#include "weft/nn/transformer_block.hpp"

using backend = weft::exec::cpu_backend<double>;
using matrix = backend::matrix;
using weft_test::check_gradient;
using weft_test::cpu64;
using weft_test::flat;
using weft_test::random_matrix;

namespace {

// Loss = sum(y .* r), so the upstream gradient is r.
double dot(const matrix& y, const matrix& r) { return y.cwiseProduct(r).sum(); }

std::span<const double> cflat(const matrix& m) { return {m.data(), std::size_t(m.size())}; }

// Random parameters (LayerNorm weights near 1), so no gradient is trivially zero.
std::vector<double> random_params(const weft::parameter_registry& registry, double scale = 0.3) {
    std::vector<double> params(registry.total_size());
    for (std::size_t i = 0; i < params.size(); ++i) params[i] = scale * weft::rng::normal(17, "params", i);
    for (const auto& e : registry.entries())
        if (e.name.find("ln") != std::string::npos && e.name.ends_with(".weight"))
            for (std::size_t i = 0; i < e.size; ++i) params[e.offset + i] += 1.0;
    return params;
}

}  // namespace

TEST_CASE("embedding: wte and wpe gradients, repeated tokens included", "[nn][gpt][gradient]") {
    weft::parameter_registry registry;
    registry.add("unrelated", {2});  // the layer must honour its offsets
    const weft::nn::embedding<backend> layer(registry, 5, 3, 4);
    CHECK(registry.find("wte.weight").shape == std::vector<int>{5, 3});
    CHECK(registry.find("wpe.weight").shape == std::vector<int>{4, 3});
    std::vector<double> params = random_params(registry);
    const std::vector<std::int32_t> tokens{1, 3, 1, 0, 4, 1, 1, 2};  // two sequences of 4
    const matrix r = random_matrix<matrix>(8, 3, "r");
    auto loss = [&] {
        weft::nn::embedding<backend>::saved s;
        return dot(layer.forward(cpu64, std::span<const double>(params), tokens, s), r);
    };
    weft::nn::embedding<backend>::saved s;
    const matrix y = layer.forward(cpu64, std::span<const double>(params), tokens, s);
    CHECK(y(4, 1) == params[registry.find("wte.weight").offset + 4 * 3 + 1] +
                         params[registry.find("wpe.weight").offset + 0 * 3 + 1]);
    layer.backward_input(cpu64, r, s);
    std::vector<double> grads(registry.total_size(), 0.0);
    layer.backward_weight(cpu64, grads, s);
    check_gradient(params, grads, loss, "dparams");
    CHECK(grads[0] == 0.0);

    const std::vector<std::int32_t> bad{0, 1, 5, 2};
    weft::nn::embedding<backend>::saved s2;
    CHECK_THROWS_WITH(layer.forward(cpu64, std::span<const double>(params), bad, s2),
                      Catch::Contains("tokens[2] = 5") && Catch::Contains("vocab_size = 5"));
}

TEST_CASE("causal attention kernel: gradient with respect to q, k and v", "[nn][gpt][gradient]") {
    const int t = 4, heads = 2, width = 6;
    matrix qkv = random_matrix<matrix>(2 * t, 3 * width, "qkv", 1.5);
    const matrix r = random_matrix<matrix>(2 * t, width, "r");
    auto loss = [&] {
        matrix probs;
        return dot(cpu64.causal_attention_forward(qkv, t, heads, probs), r);
    };
    matrix probs;
    (void)cpu64.causal_attention_forward(qkv, t, heads, probs);
    CHECK(probs.rows() == 2 * heads * t);
    for (int row = 0; row < probs.rows(); ++row) {
        CHECK(probs.row(row).sum() == Approx(1.0));
        for (int j = row % t + 1; j < t; ++j) CHECK(probs(row, j) == 0.0);  // causal mask
    }
    const matrix dqkv = cpu64.causal_attention_backward(qkv, probs, r, t, heads);
    check_gradient(flat(qkv), cflat(dqkv), loss, "dqkv");

    matrix unused;
    CHECK_THROWS_WITH(cpu64.causal_attention_forward(random_matrix<matrix>(7, 18, "x"), t, heads, unused),
                      Catch::Contains("qkv.rows() = 7") && Catch::Contains("seq_len = 4"));
    CHECK_THROWS_WITH(cpu64.causal_attention_forward(random_matrix<matrix>(8, 15, "x"), t, heads, unused),
                      Catch::Contains("qkv.cols() = 15"));
}

TEST_CASE("attention layer: input and weight gradients", "[nn][gpt][gradient]") {
    weft::parameter_registry registry;
    const weft::nn::attention<backend> layer(registry, "h.0.attn", 4, 2, 3);
    CHECK(registry.find("h.0.attn.c_attn.weight").shape == std::vector<int>{4, 12});
    CHECK(registry.find("h.0.attn.c_attn.bias").shape == std::vector<int>{12});
    CHECK(registry.find("h.0.attn.c_proj.weight").shape == std::vector<int>{4, 4});
    std::vector<double> params = random_params(registry, 0.5);
    matrix x = random_matrix<matrix>(6, 4, "x");
    const matrix r = random_matrix<matrix>(6, 4, "r");
    auto loss = [&] {
        weft::nn::attention<backend>::saved s;
        return dot(layer.forward(cpu64, std::span<const double>(params), x, s), r);
    };
    weft::nn::attention<backend>::saved s;
    (void)layer.forward(cpu64, std::span<const double>(params), x, s);
    const matrix dx = layer.backward_input(cpu64, std::span<const double>(params), r, s);
    CHECK(s.qkv.size() == 0);  // freed: the weight half does not need them
    CHECK(s.probs.size() == 0);
    std::vector<double> grads(registry.total_size(), 0.0);
    layer.backward_weight(cpu64, grads, x, s);
    check_gradient(flat(x), cflat(dx), loss, "dx");
    check_gradient(params, grads, loss, "dparams");
}

TEST_CASE("transformer block: input and weight gradients", "[nn][gpt][gradient]") {
    weft::parameter_registry registry;
    const weft::nn::transformer_block<backend> block(registry, 3, 4, 2, 3);
    std::vector<double> params = random_params(registry);
    matrix x = random_matrix<matrix>(6, 4, "x");
    const matrix r = random_matrix<matrix>(6, 4, "r");
    auto loss = [&] {
        weft::nn::transformer_block<backend>::saved s;
        return dot(block.forward(cpu64, std::span<const double>(params), x, s), r);
    };
    weft::nn::transformer_block<backend>::saved s;
    (void)block.forward(cpu64, std::span<const double>(params), x, s);
    const matrix dx = block.backward_input(cpu64, std::span<const double>(params), r, s);
    CHECK(s.pre_act.size() == 0);
    std::vector<double> grads(registry.total_size(), 0.0);
    block.backward_weight(cpu64, grads, s);
    check_gradient(flat(x), cflat(dx), loss, "dx");
    check_gradient(params, grads, loss, "dparams");
}

// The CPU backend without its fused kernels: the layers then call the two kernels each fuses.
struct unfused_backend : backend {
    void linear_gelu_forward() = delete;
    void linear_backward_input_gelu() = delete;
    void residual_layer_norm_forward() = delete;
};
static_assert(weft::exec::fused_kernels<backend>);
static_assert(weft::compute_backend<unfused_backend> && !weft::exec::fused_kernels<unfused_backend>);

TEST_CASE("transformer block: the fused kernels' path equals the two kernels' bit for bit", "[nn][gpt]") {
    weft::parameter_registry fused_registry, plain_registry;
    const weft::nn::transformer_block<backend> fused(fused_registry, 0, 8, 2, 3);
    const weft::nn::transformer_block<unfused_backend> plain(plain_registry, 0, 8, 2, 3);
    REQUIRE(fused_registry.total_size() == plain_registry.total_size());
    const std::vector<double> params = random_params(fused_registry);
    const matrix x = random_matrix<matrix>(6, 8, "x"), r = random_matrix<matrix>(6, 8, "r");
    unfused_backend plain_cpu;

    weft::nn::transformer_block<backend>::saved fs;
    weft::nn::transformer_block<unfused_backend>::saved ps;
    const matrix fy = fused.forward(cpu64, std::span<const double>(params), x, fs);
    const matrix py = plain.forward(plain_cpu, std::span<const double>(params), x, ps);
    CHECK(fy == py);
    CHECK(fs.x_mid == ps.x_mid);  // the residual sum the fused LayerNorm keeps
    CHECK(fs.mean_2 == ps.mean_2);
    CHECK(fs.rstd_2 == ps.rstd_2);
    CHECK(fs.pre_act == ps.pre_act);  // what the fused GEMM keeps for GELU's backward
    CHECK(fs.act == ps.act);
    CHECK(fused.backward_input(cpu64, std::span<const double>(params), r, fs) ==
          plain.backward_input(plain_cpu, std::span<const double>(params), r, ps));
    std::vector<double> fused_grads(params.size(), 0.0), plain_grads(params.size(), 0.0);
    fused.backward_weight(cpu64, fused_grads, fs);
    plain.backward_weight(plain_cpu, plain_grads, ps);
    CHECK(fused_grads == plain_grads);
}

// Blocks handing each other their output as two terms (the next LayerNorm adds them, as
// gpt_stage chains them) compute what blocks handing on the sum compute, bit for bit, with
// the fused kernels and without.
template <class Backend>
void check_chained_terms(Backend& b) {
    weft::parameter_registry registry;
    const weft::nn::transformer_block<Backend> first(registry, 0, 8, 2, 3), second(registry, 1, 8, 2, 3);
    const weft::nn::lm_head<Backend> head(registry, 11, 8);
    const std::vector<double> params = random_params(registry);
    const std::span<const double> p(params);
    const matrix x = random_matrix<matrix>(6, 8, "x");

    typename weft::nn::transformer_block<Backend>::saved a1, a2, b1, b2;
    typename weft::nn::lm_head<Backend>::saved ah, bh;
    const matrix summed = head.forward(b, p, second.forward(b, p, first.forward(b, p, x, a1), a2), ah);
    const auto t1 = first.forward_terms(b, p, x, b1);
    const auto t2 = second.forward_terms(b, p, t1, b2);
    const matrix chained = head.forward(b, p, *t2.residual, t2.branch, bh);
    CHECK(chained == summed);
    CHECK(b2.x == a2.x);  // the second block's input, added by its ln_1
    CHECK(b2.ln_1 == a2.ln_1);
    CHECK(bh.x == ah.x);  // the head's input, added by ln_f
    CHECK(bh.normed == ah.normed);
}

TEST_CASE("blocks chained by their output terms equal blocks chained by the sum, bit for bit", "[nn][gpt]") {
    check_chained_terms(cpu64);
    unfused_backend plain_cpu;
    check_chained_terms(plain_cpu);
}

TEST_CASE("tied LM head: input, ln_f and wte gradients", "[nn][gpt][gradient]") {
    weft::parameter_registry registry;
    const weft::nn::lm_head<backend> head(registry, 7, 4);
    CHECK(registry.find("wte.weight").shape == std::vector<int>{7, 4});
    std::vector<double> params = random_params(registry);
    matrix x = random_matrix<matrix>(5, 4, "x");
    const matrix r = random_matrix<matrix>(5, 7, "r");
    auto loss = [&] {
        weft::nn::lm_head<backend>::saved s;
        return dot(head.forward(cpu64, std::span<const double>(params), x, s), r);
    };
    weft::nn::lm_head<backend>::saved s;
    (void)head.forward(cpu64, std::span<const double>(params), x, s);
    const matrix dx = head.backward_input(cpu64, std::span<const double>(params), r, s);
    std::vector<double> grads(registry.total_size(), 0.0);
    head.backward_weight(cpu64, grads, s);
    check_gradient(flat(x), cflat(dx), loss, "dx");
    check_gradient(params, grads, loss, "dparams");
}

TEST_CASE("the head ties to an embedding's wte of the same shape only", "[nn][gpt]") {
    weft::parameter_registry registry;
    const weft::nn::embedding<backend> embed(registry, 7, 4, 3);
    const weft::nn::lm_head<backend> head(registry, 7, 4);
    CHECK(registry.entries().size() == 4);  // wte, wpe, ln_f.weight, ln_f.bias: wte once
    weft::parameter_registry other;
    const weft::nn::embedding<backend> small(other, 6, 4, 3);
    CHECK_THROWS_WITH((weft::nn::lm_head<backend>(other, 7, 4)), Catch::Contains("[6, 4]"));
}
