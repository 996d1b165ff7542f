// AdamW against a two-step reference computed from torch.optim.AdamW's formula in
// double (see the numbers' derivation below), decay skipped for 1-D tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "weft/optim/adamw.hpp"

namespace {

// w [2, 2] decays, b [2] does not.
weft::parameter_registry two_tensors() {
    weft::parameter_registry registry;
    registry.add("w", {2, 2});
    registry.add("b", {2});
    return registry;
}

const std::vector<double> start{1, -0.5, 0.25, 2, 0.5, -1};
const std::vector<double> grad1{0.5, -0.25, 0.1, 0, 0.3, -0.2};
const std::vector<double> grad2{-0.25, 0.5, 0.1, 1, 0.3, 0.4};
// lr 0.1, betas (0.9, 0.999), eps 1e-8, weight_decay 0.1; per element:
// p *= 1 - lr*wd (2-D only); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
const std::vector<double> after1{0.890000002, -0.3950000039999998, 0.14750000999999896, 1.98,
                                 0.4000000033333332, -0.9000000049999998};
const std::vector<double> after2{0.8544662986878463, -0.42766035573754624, 0.04602501989999869,
                                 1.885786318695407, 0.30000000666666715, -0.9366103565460369};
const weft::optim::adamw_options options{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};

template <class T>
std::vector<T> as(const std::vector<double>& v) {
    return {v.begin(), v.end()};
}

}  // namespace

TEMPLATE_TEST_CASE("adamw follows PyTorch's update for two steps", "[optim][adamw]", float, double) {
    const auto registry = two_tensors();
    weft::optim::basic_adamw<TestType> opt(options);
    auto params = as<TestType>(start);
    const double tolerance = std::is_same_v<TestType, float> ? 1e-6 : 1e-12;
    opt.step(params, as<TestType>(grad1), registry);
    CHECK(opt.step_count() == 1);
    for (std::size_t i = 0; i < params.size(); ++i) CHECK(params[i] == Approx(after1[i]).margin(tolerance));
    opt.step(params, as<TestType>(grad2), registry);
    CHECK(opt.step_count() == 2);
    for (std::size_t i = 0; i < params.size(); ++i) CHECK(params[i] == Approx(after2[i]).margin(tolerance));
    // Moments after two steps, element 3 (zero gradient on the first step).
    CHECK(opt.exp_avg()[3] == Approx(0.1).margin(tolerance));
    CHECK(opt.exp_avg_sq()[3] == Approx(0.001).margin(tolerance));
}

TEST_CASE("adamw on shards equals adamw on the whole buffer", "[optim][adamw]") {
    const auto registry = two_tensors();
    weft::optim::basic_adamw<double> whole(options), low(options), high(options);
    auto params = start;
    auto sharded = start;
    for (const auto* g : {&grad1, &grad2}) {
        whole.step(params, *g, registry);
        // Shard boundary inside "w": decay must still follow each element's tensor.
        low.step(std::span(sharded).subspan(0, 3), std::span(*g).subspan(0, 3), registry, 0);
        high.step(std::span(sharded).subspan(3), std::span(*g).subspan(3), registry, 3);
    }
    CHECK(sharded == params);
}

TEST_CASE("adamw rejects bad options and mismatched buffers", "[optim][adamw]") {
    using weft::optim::adamw;
    CHECK_THROWS_WITH(adamw({.lr = 0}), Catch::Contains("lr = 0"));
    CHECK_THROWS_WITH(adamw({.beta1 = 1.0}), Catch::Contains("beta1 = 1") && Catch::Contains("[0, 1)"));
    CHECK_THROWS_WITH(adamw({.beta2 = -0.1}), Catch::Contains("beta2"));
    CHECK_THROWS_WITH(adamw({.eps = 0}), Catch::Contains("eps = 0"));
    CHECK_THROWS_WITH(adamw({.weight_decay = -1}), Catch::Contains("weight_decay = -1"));
    adamw opt({});
    CHECK_THROWS_WITH(opt.set_lr(-1), Catch::Contains("lr = -1"));
    const auto registry = two_tensors();
    std::vector<float> p(6), g(5);
    CHECK_THROWS_WITH(opt.step(p, g, registry), Catch::Contains("grads.size() = 5"));
    std::vector<float> g6(6);
    CHECK_THROWS_WITH(opt.step(p, g6, registry, 1), Catch::Contains("must not exceed"));
    opt.step(p, g6, registry);
    std::vector<float> p4(4), g4(4);
    CHECK_THROWS_WITH(opt.step(p4, g4, registry), Catch::Contains("earlier steps 6"));
}

namespace {

// w [40, 50] decays, b [70] does not: ranges longer than the host update's chunk of 1024.
weft::parameter_registry large_tensors() {
    weft::parameter_registry registry;
    registry.add("w", {40, 50});
    registry.add("b", {70});
    return registry;
}

std::vector<float> wavy(std::size_t n, float phase) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = 0.3f * float(std::sin(0.7 * double(i) + phase));
    return v;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

}  // namespace

TEST_CASE("adamw's grad_scale multiplies the gradients first, bit for bit", "[optim][adamw]") {
    // What the engine's clipping relies on: no scaled copy of the gradients is made.
    const auto registry = large_tensors();
    const std::size_t n = registry.total_size();
    weft::optim::adamw scaled_in_step(options), scaled_before(options);
    auto p1 = wavy(n, 0.1f), p2 = p1;
    for (const float phase : {0.5f, 1.5f}) {
        const auto g = wavy(n, phase);
        constexpr float scale = 0.37f;
        std::vector<float> copy(g);
        for (float& x : copy) x *= scale;
        scaled_in_step.step(p1, g, registry, 0, scale);
        scaled_before.step(p2, copy, registry);
    }
    CHECK(same_bits(p1, p2));
    CHECK(same_bits(scaled_in_step.exp_avg(), scaled_before.exp_avg()));
    CHECK(same_bits(scaled_in_step.exp_avg_sq(), scaled_before.exp_avg_sq()));
    std::vector<float> g(n);
    CHECK_THROWS_WITH(scaled_in_step.step(p1, g, registry, 0, -1.0f),
                      Catch::Contains("grad_scale = -1") && Catch::Contains("must be finite and >= 0"));
}

TEST_CASE("adamw's range update replaces the host update range by range", "[optim][adamw]") {
    // A backend's optimizer kernel takes each range with its factors; doing the host's update
    // there must give the host's numbers, and every range (w decays, b does not) must come.
    const auto registry = large_tensors();
    const std::size_t n = registry.total_size();
    weft::optim::adamw by_ranges(options), on_host(options);
    auto p1 = wavy(n, 0.2f), p2 = p1;
    std::vector<std::pair<std::size_t, bool>> ranges;
    for (const float phase : {0.5f, 1.5f}) {
        const auto g = wavy(n, phase);
        ranges.clear();
        by_ranges.step(p1, g, registry, 0, 0.5f,
                       [&](std::span<float> p, std::span<const float> grads, std::span<float> m, std::span<float> v,
                           const weft::optim::adamw_factors<float>& f, bool decays) {
                           CHECK(f.grad_scale == 0.5f);
                           ranges.emplace_back(p.size(), decays);
                           weft::optim::adamw_update_on_host<float>(p, grads, m, v, f, decays);
                       });
        on_host.step(p2, g, registry, 0, 0.5f);
    }
    CHECK(ranges == std::vector<std::pair<std::size_t, bool>>{{2000, true}, {70, false}});
    CHECK(same_bits(p1, p2));
    CHECK(same_bits(by_ranges.exp_avg_sq(), on_host.exp_avg_sq()));
    CHECK(by_ranges.step_count() == 2);
}

TEST_CASE("adamw's host update is the scalar loop of IEEE-rounded operations, bit for bit", "[optim][adamw]") {
    // exec::cuda's AdamW kernel is held to this update bit for bit (test_cuda_backend), with a
    // correctly rounded square root (__fsqrt_rn). Eigen's vectorised float sqrt under its
    // default EIGEN_FAST_MATH is an approximate reciprocal square root and a Newton step,
    // wrong in the last bits for about 4 elements in 10: the host must not use it.
    constexpr std::size_t n = 5000;
    std::vector<float> p(n), g(n), m(n), v(n);
    for (std::size_t i = 0; i < n; ++i) {
        const auto x = static_cast<float>(i);
        p[i] = std::sin(0.37f * x);
        g[i] = 1e-3f * std::cos(1.3f * x) + 1e-6f * x;
        m[i] = 1e-4f * std::sin(2.1f * x);
        v[i] = 1e-7f * (1.5f + std::cos(0.7f * x));  // positive, over several binades
    }
    for (const double beta1 : {0.9, 0.3}) {  // both of torch.lerp's forms
        const auto f = weft::optim::adamw_factors<float>::of_step(
            {.lr = 1e-3, .beta1 = beta1, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1}, 7, 0.75f);
        auto want_p = p, want_m = m, want_v = v;
        for (std::size_t i = 0; i < n; ++i) {
            const float gi = g[i] * f.grad_scale;
            want_p[i] *= f.decay;
            if (f.lerp_from_start)
                want_m[i] += f.one_minus_beta1 * (gi - want_m[i]);
            else
                want_m[i] = gi - (gi - want_m[i]) * f.beta1;
            want_v[i] = want_v[i] * f.beta2 + f.one_minus_beta2 * gi * gi;
            want_p[i] += -f.step_size * (want_m[i] / (std::sqrt(want_v[i]) / f.bias_correction2_sqrt + f.eps));
        }
        auto got_p = p, got_m = m, got_v = v;
        weft::optim::adamw_update_on_host<float>(got_p, g, got_m, got_v, f, true);
        INFO("beta1 " << beta1);
        CHECK(same_bits(got_m, want_m));
        CHECK(same_bits(got_v, want_v));
        CHECK(same_bits(got_p, want_p));
    }
}
