// mlp_stage: gradients of whole stages (finite differences, double), bit-exact
// equivalence of any split of the model (float), split-backward ordering, misuse errors.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "cpu_backends.hpp"
#include "test_support.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/mlp.hpp"

using weft::nn::mlp_config;
using weft::nn::mlp_stage;
using weft::nn::unit_range;
using weft_test::check_gradient;
using weft_test::cpu;
using weft_test::cpu64;
using weft_test::flat;
using weft_test::random_matrix;

namespace {

const mlp_config small{.input_dim = 3, .hidden_dim = 4, .num_blocks = 2, .num_classes = 3, .expansion = 2};
const std::vector<std::int32_t> labels5{0, 2, 1, 1, 0};

template <class Span>
bool bit_equal(const Span& a, const Span& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

template <class Backend>
std::span<const typename Backend::scalar> tensor(const mlp_stage<Backend>& stage, std::string_view name) {
    const auto& info = stage.registry().find(name);
    return stage.parameters().subspan(info.offset, info.size);
}

template <class Backend>
std::span<const typename Backend::scalar> tensor_grad(const mlp_stage<Backend>& stage, std::string_view name) {
    const auto& info = stage.registry().find(name);
    return stage.gradients().subspan(info.offset, info.size);
}

}  // namespace

TEST_CASE("mlp_stage::layout is the registry the stage builds, without its weights", "[nn][stage]") {
    for (const unit_range units : {unit_range{0, 4}, unit_range{0, 1}, unit_range{1, 3}, unit_range{3, 4}}) {
        INFO("units [" << units.first << ", " << units.last << ")");
        const auto layout = mlp_stage<weft::exec::cpu>::layout(small, units);
        const mlp_stage<weft::exec::cpu> stage(cpu, small, units);
        weft_test::check_same_layout(layout, stage.registry());
        CHECK(layout.total_size() == stage.parameters().size());
    }
}

TEST_CASE("stages register global tensor names and shapes", "[nn][stage]") {
    const mlp_stage<weft::exec::cpu> whole(cpu, small, {0, 4});
    std::vector<std::string> names;
    for (const auto& e : whole.registry().entries()) names.push_back(e.name);
    CHECK(names == std::vector<std::string>{
                       "input.weight", "input.bias",
                       "blocks.0.ln.weight", "blocks.0.ln.bias", "blocks.0.fc1.weight", "blocks.0.fc1.bias",
                       "blocks.0.fc2.weight", "blocks.0.fc2.bias",
                       "blocks.1.ln.weight", "blocks.1.ln.bias", "blocks.1.fc1.weight", "blocks.1.fc1.bias",
                       "blocks.1.fc2.weight", "blocks.1.fc2.bias",
                       "head.ln.weight", "head.ln.bias", "head.fc.weight", "head.fc.bias"});
    CHECK(whole.registry().find("blocks.1.fc1.weight").shape == std::vector<int>{4, 8});
    CHECK(whole.registry().find("head.fc.weight").shape == std::vector<int>{4, 3});
    CHECK(whole.parameters().size() == whole.registry().total_size());
    CHECK(whole.is_first());
    CHECK(whole.is_last());
    CHECK(whole.input_width() == 3);
    CHECK(whole.output_width() == 3);

    const mlp_stage<weft::exec::cpu> middle(cpu, small, {2, 3});
    CHECK_FALSE(middle.is_first());
    CHECK_FALSE(middle.is_last());
    CHECK(middle.input_width() == 4);
    CHECK(middle.output_width() == 4);
    CHECK(middle.registry().entries().front().name == "blocks.1.ln.weight");
    CHECK(middle.registry().entries().front().offset == 0);
}

TEST_CASE("initial weights do not depend on the partition", "[nn][stage]") {
    const mlp_stage<weft::exec::cpu> whole(cpu, small, {0, 4});
    const mlp_stage<weft::exec::cpu> part(cpu, small, {2, 4});
    for (const auto& e : part.registry().entries())
        CHECK(bit_equal(tensor(part, e.name), tensor(whole, e.name)));
    // Weight matrices are random with std 1/sqrt(fan_in); LayerNorm starts at (1, 0).
    const auto w = tensor(whole, "blocks.0.fc1.weight");
    CHECK(std::any_of(w.begin(), w.end(), [](float v) { return v != 0; }));
    CHECK(tensor(whole, "head.ln.weight")[0] == 1.0f);
    CHECK(tensor(whole, "input.bias")[0] == 0.0f);
    mlp_config other = small;
    other.seed = 99;
    const mlp_stage<weft::exec::cpu> reseeded(cpu, other, {0, 4});
    CHECK_FALSE(bit_equal(tensor(reseeded, "blocks.0.fc1.weight"), w));
}

TEST_CASE("whole model with loss: weight gradients match finite differences", "[nn][stage][gradient]") {
    using backend = weft::exec::cpu_backend<double>;
    mlp_stage<backend> stage(cpu64, small, {0, 4});
    const auto x = random_matrix<backend::matrix>(5, 3, "x");
    auto loss = [&] {
        mlp_stage<backend>::stash s;
        return weft::nn::cross_entropy(cpu64, stage.forward(x, s), labels5).loss;
    };
    mlp_stage<backend>::stash s;
    const auto ce = weft::nn::cross_entropy(cpu64, stage.forward(x, s), labels5);
    const auto dx = stage.backward_input(ce.dlogits, s);
    CHECK(dx.size() == 0);  // the first stage does not compute an input gradient
    stage.backward_weight(s);
    const std::vector<double> grads(stage.gradients().begin(), stage.gradients().end());
    check_gradient(stage.parameters(), grads, loss, "dparams");
}

TEST_CASE("stage without the input unit: input and weight gradients", "[nn][stage][gradient]") {
    using backend = weft::exec::cpu_backend<double>;
    mlp_stage<backend> stage(cpu64, small, {1, 4});
    auto x = random_matrix<backend::matrix>(5, 4, "x", 1.5);
    auto loss = [&] {
        mlp_stage<backend>::stash s;
        return weft::nn::cross_entropy(cpu64, stage.forward(x, s), labels5).loss;
    };
    mlp_stage<backend>::stash s;
    const auto ce = weft::nn::cross_entropy(cpu64, stage.forward(x, s), labels5);
    const auto dx = stage.backward_input(ce.dlogits, s);
    stage.backward_weight(s);
    const std::vector<double> grads(stage.gradients().begin(), stage.gradients().end());
    check_gradient(flat(x), std::span<const double>(dx.data(), std::size_t(dx.size())), loss, "dx");
    check_gradient(stage.parameters(), grads, loss, "dparams");
}

TEST_CASE("middle stage of blocks: input and weight gradients", "[nn][stage][gradient]") {
    using backend = weft::exec::cpu_backend<double>;
    mlp_stage<backend> stage(cpu64, small, {1, 3});
    auto x = random_matrix<backend::matrix>(3, 4, "x");
    const auto r = random_matrix<backend::matrix>(3, 4, "r");
    auto loss = [&] {
        mlp_stage<backend>::stash s;
        return stage.forward(x, s).cwiseProduct(r).sum();
    };
    mlp_stage<backend>::stash s;
    (void)stage.forward(x, s);
    const auto dx = stage.backward(r, s);
    const std::vector<double> grads(stage.gradients().begin(), stage.gradients().end());
    check_gradient(flat(x), std::span<const double>(dx.data(), std::size_t(dx.size())), loss, "dx");
    check_gradient(stage.parameters(), grads, loss, "dparams");
}

TEST_CASE("chained stages equal the whole model bit for bit", "[nn][stage][split]") {
    using backend = weft::exec::cpu;
    const mlp_config config{.input_dim = 6, .hidden_dim = 16, .num_blocks = 4, .num_classes = 5};
    const auto x = random_matrix<backend::matrix>(8, 6, "x");
    const std::vector<std::int32_t> labels{0, 1, 2, 3, 4, 0, 1, 2};

    mlp_stage<backend> whole(cpu, config, {0, 6});
    mlp_stage<backend>::stash s;
    const auto logits = whole.forward(x, s);
    const auto ce = weft::nn::cross_entropy(cpu, logits, labels, 0.5f);
    (void)whole.backward(ce.dlogits, s);

    for (int k : {1, 3, 5}) {
        INFO("split at unit " << k);
        mlp_stage<backend> a(cpu, config, {0, k});
        mlp_stage<backend> b(cpu, config, {k, 6});
        mlp_stage<backend>::stash sa, sb;
        const auto mid = a.forward(x, sa);
        const auto logits_split = b.forward(mid, sb);
        REQUIRE(logits_split.rows() == logits.rows());
        CHECK(std::memcmp(logits_split.data(), logits.data(), sizeof(float) * std::size_t(logits.size())) == 0);
        const auto ce_split = weft::nn::cross_entropy(cpu, logits_split, labels, 0.5f);
        CHECK(ce_split.loss == ce.loss);
        const auto dmid = b.backward_input(ce_split.dlogits, sb);
        (void)a.backward_input(dmid, sa);
        a.backward_weight(sa);
        b.backward_weight(sb);
        for (const auto* stage : {&a, &b})
            for (const auto& e : stage->registry().entries()) {
                INFO(e.name);
                CHECK(bit_equal(tensor_grad(*stage, e.name), tensor_grad(whole, e.name)));
            }
    }
}

TEST_CASE("split backward in any order across micro-batches accumulates the same gradients",
          "[nn][stage][split]") {
    using backend = weft::exec::cpu;
    const mlp_config config{.input_dim = 5, .hidden_dim = 8, .num_blocks = 2, .num_classes = 3};
    const auto x0 = random_matrix<backend::matrix>(4, 5, "x0");
    const auto x1 = random_matrix<backend::matrix>(4, 5, "x1");
    const std::vector<std::int32_t> l0{0, 1, 2, 0}, l1{2, 2, 1, 0};

    auto run = [&](int order) {
        mlp_stage<backend> stage(cpu, config, {0, 4});
        mlp_stage<backend>::stash s0, s1;
        const auto d0 = weft::nn::cross_entropy(cpu, stage.forward(x0, s0), l0, 0.5f).dlogits;
        const auto d1 = weft::nn::cross_entropy(cpu, stage.forward(x1, s1), l1, 0.5f).dlogits;
        if (order == 0) {  // full backward, micro-batch order (1F1B / GPipe)
            (void)stage.backward(d0, s0);
            (void)stage.backward(d1, s1);
        } else if (order == 1) {  // both I first, W deferred in reverse order (zero bubble)
            (void)stage.backward_input(d1, s1);
            (void)stage.backward_input(d0, s0);
            CHECK(std::all_of(stage.gradients().begin(), stage.gradients().end(),
                              [](float g) { return g == 0; }));  // I never touches weight grads
            stage.backward_weight(s1);
            stage.backward_weight(s0);
        } else {  // I and W interleaved
            (void)stage.backward_input(d0, s0);
            (void)stage.backward_input(d1, s1);
            stage.backward_weight(s0);
            stage.backward_weight(s1);
        }
        return std::vector<float>(stage.gradients().begin(), stage.gradients().end());
    };
    const auto reference = run(0);
    CHECK(std::any_of(reference.begin(), reference.end(), [](float g) { return g != 0; }));
    CHECK(run(1) == reference);
    CHECK(run(2) == reference);
}

TEST_CASE("the stash shrinks after backward_input and empties after backward_weight", "[nn][stage]") {
    using backend = weft::exec::cpu;
    mlp_stage<backend> stage(cpu, small, {1, 3});
    const auto x = random_matrix<backend::matrix>(4, 4, "x");
    mlp_stage<backend>::stash s;
    CHECK(s.empty());
    (void)stage.forward(x, s);
    const std::size_t after_forward = s.bytes();
    CHECK(after_forward > 0);
    mlp_stage<backend>::stash moved = std::move(s);  // stashes are movable
    (void)stage.backward_input(backend::matrix::Ones(4, 4), moved);
    CHECK(moved.bytes() > 0);
    stage.backward_weight(moved);
    CHECK(moved.empty());
    CHECK(moved.bytes() == 0);
    stage.zero_gradients();
    CHECK(std::all_of(stage.gradients().begin(), stage.gradients().end(), [](float g) { return g == 0; }));
}

TEST_CASE("misuse of a stage is a clear error", "[nn][stage]") {
    using backend = weft::exec::cpu;
    CHECK_THROWS_WITH((mlp_stage<backend>(cpu, small, {2, 2})),
                      Catch::Contains("unit_range") && Catch::Contains("[2, 2)"));
    CHECK_THROWS_WITH((mlp_stage<backend>(cpu, small, {3, 5})), Catch::Contains("num_units = 4"));
    CHECK_THROWS_AS((mlp_stage<backend>(cpu, small, {-1, 2})), weft::error);
    mlp_config bad = small;
    bad.hidden_dim = 0;
    CHECK_THROWS_WITH((mlp_stage<backend>(cpu, bad, {0, 1})), Catch::Contains("hidden_dim"));

    mlp_stage<backend> stage(cpu, small, {1, 3});
    mlp_stage<backend>::stash s;
    CHECK_THROWS_WITH(stage.forward(backend::matrix::Ones(2, 3), s), Catch::Contains("x.cols() = 3"));
    CHECK_THROWS_WITH(stage.backward_input(backend::matrix::Ones(2, 4), s), Catch::Contains("call forward first"));
    CHECK_THROWS_AS(stage.backward_weight(s), weft::error);
    (void)stage.forward(backend::matrix::Ones(2, 4), s);
    CHECK_THROWS_WITH(stage.forward(backend::matrix::Ones(2, 4), s), Catch::Contains("must be empty"));
    CHECK_THROWS_WITH(stage.backward_weight(s), Catch::Contains("backward_input"));
    CHECK_THROWS_WITH(stage.backward_input(backend::matrix::Ones(3, 4), s), Catch::Contains("shape must be 2x4"));
    (void)stage.backward_input(backend::matrix::Ones(2, 4), s);
    CHECK_THROWS_AS(stage.backward_input(backend::matrix::Ones(2, 4), s), weft::error);
}

TEST_CASE("a stage computes with borrowed tensors and refuses tensors of another layout", "[nn][stage]") {
        const mlp_stage<weft::exec::cpu> owner(cpu, small, {0, 4});
    // initial_tensors draws exactly what an owning stage draws.
    auto tensors = mlp_stage<weft::exec::cpu>::initial_tensors(small, {0, 4});
    CHECK(tensors.registry() == owner.registry());
    CHECK(bit_equal(std::span<const float>(tensors.parameters()), owner.parameters()));

    mlp_stage<weft::exec::cpu> borrower(cpu, small, {0, 4}, tensors);
    CHECK(&borrower.tensors() == &tensors);
    CHECK(&borrower.backend() == &cpu);
    const weft::exec::cpu::matrix x = random_matrix<weft::exec::cpu::matrix>(5, 3, "x");
    mlp_stage<weft::exec::cpu>::stash s1, s2;
    const auto before = borrower.forward(x, s1);
    // The stage reads the tensors it was given, not a copy: changing them changes its output.
    tensors.parameters()[0] += 1.0f;
    const auto after = borrower.forward(x, s2);
    CHECK_FALSE(bit_equal(std::span<const float>(before.data(), std::size_t(before.size())),
                          std::span<const float>(after.data(), std::size_t(after.size()))));
    // Weight gradients land in the borrowed buffer.
    (void)borrower.backward(after, s2);
    bool any_gradient = false;
    for (const float g : tensors.gradients()) any_gradient = any_gradient || g != 0.0f;
    CHECK(any_gradient);

    auto other = mlp_stage<weft::exec::cpu>::initial_tensors(small, {0, 3});
    CHECK_THROWS_WITH((mlp_stage<weft::exec::cpu>(cpu, small, {0, 4}, other)),
                      Catch::Contains("mlp_stage tensors") && Catch::Contains("units [0, 4)"));
}
