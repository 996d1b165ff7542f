// gpt_stage: Hugging Face tensor names and shapes, GPT-2 initialization, whole-stage
// gradients (finite differences, double), bit-exact equivalence of any split (float),
// the causal mask end to end, config validation and misuse errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_backends.hpp"
#include "test_support.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/gpt.hpp"

using weft::nn::gpt_config;
using weft::nn::gpt_stage;
using weft::nn::token_view;
using weft::nn::unit_range;
using weft_test::check_gradient;
using weft_test::cpu;
using weft_test::cpu64;
using weft_test::flat;
using weft_test::random_matrix;

namespace {

const gpt_config tiny{.num_layers = 2, .d_model = 4, .num_heads = 2, .vocab_size = 7, .seq_len = 3};

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::string_view tag) {
    std::vector<std::int32_t> tokens(n);
    for (std::size_t i = 0; i < n; ++i)
        tokens[i] = std::int32_t(weft::rng::uniform(5, tag, i) * float(vocab)) % vocab;
    return tokens;
}

template <class Span>
bool bit_equal(const Span& a, const Span& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

template <class Backend>
std::span<const typename Backend::scalar> tensor(const gpt_stage<Backend>& stage, std::string_view name) {
    const auto& info = stage.registry().find(name);
    return stage.parameters().subspan(info.offset, info.size);
}

template <class Backend>
std::span<const typename Backend::scalar> tensor_grad(const gpt_stage<Backend>& stage, std::string_view name) {
    const auto& info = stage.registry().find(name);
    return stage.gradients().subspan(info.offset, info.size);
}

// Moves the parameters away from their initial values (LayerNorm 1, biases 0) so no
// gradient check passes trivially.
template <class Backend>
void perturb(gpt_stage<Backend>& stage) {
    auto p = stage.parameters();
    for (std::size_t i = 0; i < p.size(); ++i) p[i] += typename Backend::scalar(0.2 * weft::rng::normal(3, "perturb", i));
}

}  // namespace

TEST_CASE("gpt_stage::layout is the registry the stage builds, without its weights", "[nn][gpt]") {
    for (const unit_range units : {unit_range{0, 4}, unit_range{0, 1}, unit_range{1, 3}, unit_range{2, 4},
                                   unit_range{3, 4}}) {
        INFO("units [" << units.first << ", " << units.last << ")");
        const auto layout = gpt_stage<weft::exec::cpu>::layout(tiny, units);
        const gpt_stage<weft::exec::cpu> stage(cpu, tiny, units);
        weft_test::check_same_layout(layout, stage.registry());
        CHECK(layout.total_size() == stage.parameters().size());
    }
    CHECK_THROWS_WITH(gpt_stage<weft::exec::cpu>::layout(tiny, {2, 2}), Catch::Contains("unit_range"));
}

TEST_CASE("a gpt stage borrows tensors of its layout, tp slices included, and refuses others", "[nn][gpt]") {
        const gpt_stage<weft::exec::cpu> owner(cpu, tiny, {0, 4});
    auto tensors = gpt_stage<weft::exec::cpu>::initial_tensors(tiny, {0, 4});
    CHECK(tensors.registry() == owner.registry());
    CHECK(bit_equal(std::span<const float>(tensors.parameters()), owner.parameters()));
    const gpt_stage<weft::exec::cpu> borrower(cpu, tiny, {0, 4}, tensors);
    CHECK(&borrower.tensors() == &tensors);
    CHECK(borrower.parameters().data() == tensors.parameters().data());

    // A tensor-parallel slice's initial tensors are that rank's layout.
    auto slice = gpt_stage<weft::exec::cpu>::initial_tensors(tiny, {0, 4}, 1, 2);
    CHECK(slice.registry() == gpt_stage<weft::exec::cpu>::layout(tiny, {0, 4}, 1, 2));
    // Borrowed by a stage without that tp group, the slice is refused: the layouts differ.
    CHECK_THROWS_WITH((gpt_stage<weft::exec::cpu>(cpu, tiny, {0, 4}, slice)),
                      Catch::Contains("gpt_stage tensors") && Catch::Contains("tp rank 0 of 1"));
    auto part = gpt_stage<weft::exec::cpu>::initial_tensors(tiny, {1, 4});
    CHECK_THROWS_WITH((gpt_stage<weft::exec::cpu>(cpu, tiny, {0, 4}, part)), Catch::Contains("units [0, 4)"));
}

TEST_CASE("gpt stages register Hugging Face GPT-2 names and shapes", "[nn][gpt]") {
    const gpt_stage<weft::exec::cpu> whole(cpu, tiny, {0, 4});
    std::vector<std::string> names;
    for (const auto& e : whole.registry().entries()) names.push_back(e.name);
    std::vector<std::string> expected{"wte.weight", "wpe.weight"};
    for (const char* block : {"h.0.", "h.1."})
        for (const char* t : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                              "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                              "mlp.c_proj.weight", "mlp.c_proj.bias"})
            expected.push_back(std::string(block) + t);
    expected.push_back("ln_f.weight");
    expected.push_back("ln_f.bias");
    CHECK(names == expected);  // wte once: the head is tied to it
    CHECK(static_cast<std::int64_t>(whole.parameters().size()) == tiny.parameter_count());
    const auto shape = [&](const char* name) { return whole.registry().find(name).shape; };
    CHECK(shape("wte.weight") == std::vector<int>{7, 4});
    CHECK(shape("wpe.weight") == std::vector<int>{3, 4});
    CHECK(shape("h.1.ln_1.weight") == std::vector<int>{4});
    CHECK(shape("h.1.attn.c_attn.weight") == std::vector<int>{4, 12});
    CHECK(shape("h.1.attn.c_attn.bias") == std::vector<int>{12});
    CHECK(shape("h.1.attn.c_proj.weight") == std::vector<int>{4, 4});
    CHECK(shape("h.1.mlp.c_fc.weight") == std::vector<int>{4, 16});
    CHECK(shape("h.1.mlp.c_fc.bias") == std::vector<int>{16});
    CHECK(shape("h.1.mlp.c_proj.weight") == std::vector<int>{16, 4});
    CHECK(shape("ln_f.bias") == std::vector<int>{4});
    CHECK(whole.parameters().size() == whole.registry().total_size());
    CHECK(whole.is_first());
    CHECK(whole.is_last());
    CHECK(whole.output_width() == 7);

    const gpt_stage<weft::exec::cpu> middle(cpu, tiny, {2, 3});
    CHECK_FALSE(middle.is_first());
    CHECK_FALSE(middle.is_last());
    CHECK(middle.input_width() == 4);
    CHECK(middle.output_width() == 4);
    CHECK(middle.registry().entries().front().name == "h.1.ln_1.weight");
    CHECK(middle.registry().entries().size() == 12);

    const gpt_stage<weft::exec::cpu> head(cpu, tiny, {3, 4});  // registers its own copy of wte
    CHECK(head.registry().contains("wte.weight"));
    CHECK_FALSE(head.registry().contains("wpe.weight"));
    CHECK(head.output_width() == 7);
    const gpt_stage<weft::exec::cpu> embed(cpu, tiny, {0, 1});
    CHECK(embed.registry().entries().size() == 2);
    CHECK(embed.output_width() == 4);
}

TEST_CASE("gpt initialization is GPT-2's and does not depend on the partition", "[nn][gpt]") {
    const gpt_config config{.num_layers = 3, .d_model = 8, .num_heads = 2, .vocab_size = 11, .seq_len = 4, .seed = 77};
    const gpt_stage<weft::exec::cpu> whole(cpu, config, {0, 5});
    const auto expect_normal = [&](const char* name, double std_dev) {
        INFO(name);
        const auto w = tensor(whole, name);
        for (std::size_t i = 0; i < w.size(); ++i)
            REQUIRE(w[i] == float(double(weft::rng::normal(77, name, i)) * std_dev));
    };
    expect_normal("wte.weight", 0.02);
    expect_normal("wpe.weight", 0.02);
    expect_normal("h.2.attn.c_attn.weight", 0.02);
    expect_normal("h.0.mlp.c_fc.weight", 0.02);
    expect_normal("h.1.attn.c_proj.weight", 0.02 / std::sqrt(6.0));
    expect_normal("h.1.mlp.c_proj.weight", 0.02 / std::sqrt(6.0));
    for (const auto& e : whole.registry().entries()) {
        INFO(e.name);
        const auto v = tensor(whole, e.name);
        if (e.name.ends_with(".bias")) CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0; }));
        if (e.name.find("ln_") != std::string::npos && e.name.ends_with(".weight"))
            CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 1; }));
    }
    for (unit_range part : {unit_range{0, 2}, unit_range{2, 4}, unit_range{4, 5}}) {
        const gpt_stage<weft::exec::cpu> stage(cpu, config, part);
        for (const auto& e : stage.registry().entries()) {
            INFO(e.name);
            CHECK(bit_equal(tensor(stage, e.name), tensor(whole, e.name)));
        }
    }
}

TEST_CASE("config validation names the field", "[nn][gpt]") {
    const auto fails_on = [](gpt_config c, const char* field) {
        INFO(field);
        CHECK_THROWS_WITH(c.validate(), Catch::Contains(field));
        CHECK_THROWS_AS((gpt_stage<weft::exec::cpu>(cpu, c, {0, 1})), weft::error);
    };
    CHECK_NOTHROW(tiny.validate());
    CHECK(tiny.num_units() == 4);
    gpt_config c = tiny;
    c.num_layers = 0;
    fails_on(c, "gpt_config.num_layers");
    c = tiny;
    c.d_model = 0;
    fails_on(c, "gpt_config.d_model");
    c = tiny;
    c.num_heads = 0;
    fails_on(c, "gpt_config.num_heads");
    c = tiny;
    c.num_heads = 3;
    fails_on(c, "must divide d_model = 4");
    c = tiny;
    c.vocab_size = 1;
    fails_on(c, "gpt_config.vocab_size");
    c = tiny;
    c.seq_len = 0;
    fails_on(c, "gpt_config.seq_len");
}

TEST_CASE("whole gpt with loss: weight gradients match finite differences (tied wte)", "[nn][gpt][gradient]") {
    using backend = weft::exec::cpu_backend<double>;
    gpt_stage<backend> stage(cpu64, tiny, {0, 4});
    perturb(stage);
    const auto tokens = random_tokens(6, 7, "tokens");
    const auto targets = random_tokens(6, 7, "targets");
    const token_view batch{tokens, 2, 3};
    auto loss = [&] {
        gpt_stage<backend>::stash s;
        return weft::nn::cross_entropy(cpu64, stage.forward(batch, s), targets).loss;
    };
    gpt_stage<backend>::stash s;
    const auto ce = weft::nn::cross_entropy(cpu64, stage.forward(batch, s), targets);
    const auto dx = stage.backward_input(ce.dlogits, s);
    CHECK(dx.size() == 0);  // token ids have no gradient
    stage.backward_weight(s);
    const std::vector<double> grads(stage.gradients().begin(), stage.gradients().end());
    check_gradient(stage.parameters(), grads, loss, "dparams");
}

TEST_CASE("gpt stage without the embedding: input and weight gradients", "[nn][gpt][gradient]") {
    using backend = weft::exec::cpu_backend<double>;
    gpt_stage<backend> stage(cpu64, tiny, {1, 4});
    perturb(stage);
    auto x = random_matrix<backend::matrix>(6, 4, "x");
    const auto targets = random_tokens(6, 7, "targets");
    auto loss = [&] {
        gpt_stage<backend>::stash s;
        return weft::nn::cross_entropy(cpu64, stage.forward(x, s), targets).loss;
    };
    gpt_stage<backend>::stash s;
    const auto ce = weft::nn::cross_entropy(cpu64, stage.forward(x, s), targets);
    const auto dx = stage.backward(ce.dlogits, s);
    const std::vector<double> grads(stage.gradients().begin(), stage.gradients().end());
    check_gradient(flat(x), std::span<const double>(dx.data(), std::size_t(dx.size())), loss, "dx");
    check_gradient(stage.parameters(), grads, loss, "dparams");
}

TEST_CASE("embedding-only gpt stage: wte and wpe gradients", "[nn][gpt][gradient]") {
    using backend = weft::exec::cpu_backend<double>;
    gpt_stage<backend> stage(cpu64, tiny, {0, 1});
    const auto tokens = random_tokens(6, 7, "tokens");
    const token_view batch{tokens, 2, 3};
    const auto r = random_matrix<backend::matrix>(6, 4, "r");
    auto loss = [&] {
        gpt_stage<backend>::stash s;
        return stage.forward(batch, s).cwiseProduct(r).sum();
    };
    gpt_stage<backend>::stash s;
    (void)stage.forward(batch, s);
    (void)stage.backward(r, s);
    const std::vector<double> grads(stage.gradients().begin(), stage.gradients().end());
    check_gradient(stage.parameters(), grads, loss, "dparams");
}

TEST_CASE("split gpt stages equal the whole model bit for bit", "[nn][gpt][split]") {
    using backend = weft::exec::cpu;
    const gpt_config config{.num_layers = 3, .d_model = 8, .num_heads = 2, .vocab_size = 13, .seq_len = 5};
    const auto tokens = random_tokens(15, 13, "tokens");
    const auto targets = random_tokens(15, 13, "targets");
    const token_view batch{tokens, 3, 5};

    gpt_stage<backend> whole(cpu, config, {0, 5});
    gpt_stage<backend>::stash s;
    const auto logits = whole.forward(batch, s);
    const auto ce = weft::nn::cross_entropy(cpu, logits, targets, 0.5f);
    (void)whole.backward(ce.dlogits, s);

    const std::vector<std::vector<int>> splits{{0, 1, 5}, {0, 4, 5}, {0, 2, 5}, {0, 1, 3, 5}, {0, 1, 2, 3, 4, 5}};
    for (const auto& cuts : splits) {
        INFO("split at " << Catch::Detail::stringify(cuts));
        std::vector<gpt_stage<backend>> stages;
        for (std::size_t i = 0; i + 1 < cuts.size(); ++i)
            stages.emplace_back(cpu, config, unit_range{cuts[i], cuts[i + 1]});
        std::vector<gpt_stage<backend>::stash> stashes(stages.size());
        auto y = stages[0].forward(batch, stashes[0]);
        for (std::size_t i = 1; i < stages.size(); ++i) y = stages[i].forward(y, stashes[i]);
        REQUIRE(y.rows() == logits.rows());
        REQUIRE(y.cols() == logits.cols());
        CHECK(std::memcmp(y.data(), logits.data(), sizeof(float) * std::size_t(logits.size())) == 0);
        const auto ce_split = weft::nn::cross_entropy(cpu, y, targets, 0.5f);
        CHECK(ce_split.loss == ce.loss);
        auto d = ce_split.dlogits;
        for (std::size_t i = stages.size(); i-- > 0;) d = stages[i].backward_input(d, stashes[i]);
        CHECK(d.size() == 0);
        for (std::size_t i = 0; i < stages.size(); ++i) stages[i].backward_weight(stashes[i]);
        // The engine's job for tied weights: sum same-named gradients over stages.
        std::vector<float> wte(tensor_grad(whole, "wte.weight").size(), 0.0f);
        for (const auto& stage : stages)
            for (const auto& e : stage.registry().entries()) {
                INFO(e.name);
                if (e.name == "wte.weight") {
                    const auto g = tensor_grad(stage, e.name);
                    for (std::size_t i = 0; i < g.size(); ++i) wte[i] += g[i];
                } else {
                    CHECK(bit_equal(tensor_grad(stage, e.name), tensor_grad(whole, e.name)));
                }
            }
        CHECK(bit_equal(std::span<const float>(wte), tensor_grad(whole, "wte.weight")));
    }
    // The two halves of the tied gradient are both there: the split parts differ.
    gpt_stage<backend> first(cpu, config, {0, 1}), rest(cpu, config, {1, 5});
    gpt_stage<backend>::stash s1, s2;
    const auto dl = weft::nn::cross_entropy(cpu, rest.forward(first.forward(batch, s1), s2), targets).dlogits;
    (void)first.backward(rest.backward(dl, s2), s1);
    CHECK_FALSE(bit_equal(tensor_grad(first, "wte.weight"), tensor_grad(rest, "wte.weight")));
}

TEST_CASE("causal mask: a later token never changes earlier positions' logits", "[nn][gpt]") {
    using backend = weft::exec::cpu;
    const gpt_config config{.num_layers = 2, .d_model = 8, .num_heads = 2, .vocab_size = 13, .seq_len = 6};
    gpt_stage<backend> stage(cpu, config, {0, 4});
    perturb(stage);
    auto tokens = random_tokens(12, 13, "tokens");
    gpt_stage<backend>::stash s;
    const auto before = stage.forward(token_view{tokens, 2, 6}, s);
    tokens[3] = (tokens[3] + 5) % 13;  // sequence 0, position 3
    gpt_stage<backend>::stash s2;
    const auto after = stage.forward(token_view{tokens, 2, 6}, s2);
    for (int row = 0; row < 12; ++row) {
        INFO("row " << row);
        const bool affected = row >= 3 && row < 6;
        CHECK((before.row(row) == after.row(row)) == !affected);
    }
}

TEST_CASE("the gpt stash shrinks after backward_input and empties after backward_weight", "[nn][gpt]") {
    using backend = weft::exec::cpu;
    gpt_stage<backend> stage(cpu, tiny, {1, 3});
    const auto x = random_matrix<backend::matrix>(6, 4, "x");
    gpt_stage<backend>::stash s;
    CHECK(s.empty());
    (void)stage.forward(x, s);
    const std::size_t after_forward = s.bytes();
    CHECK(after_forward > 0);
    gpt_stage<backend>::stash moved = std::move(s);  // stashes are movable
    (void)stage.backward_input(backend::matrix::Ones(6, 4), moved);
    CHECK(moved.bytes() > 0);
    stage.backward_weight(moved);
    CHECK(moved.empty());
    CHECK(moved.bytes() == 0);
    CHECK(std::any_of(stage.gradients().begin(), stage.gradients().end(), [](float g) { return g != 0; }));
    stage.zero_gradients();
    CHECK(std::all_of(stage.gradients().begin(), stage.gradients().end(), [](float g) { return g == 0; }));
}

TEST_CASE("misuse of a gpt stage is a clear error", "[nn][gpt]") {
    using backend = weft::exec::cpu;
    CHECK_THROWS_WITH((gpt_stage<backend>(cpu, tiny, {2, 2})),
                      Catch::Contains("unit_range") && Catch::Contains("[2, 2)"));
    CHECK_THROWS_WITH((gpt_stage<backend>(cpu, tiny, {3, 5})), Catch::Contains("num_units = 4"));

    const std::vector<std::int32_t> tokens{1, 2, 3, 4, 5, 6};
    gpt_stage<backend> first(cpu, tiny, {0, 2});
    gpt_stage<backend> later(cpu, tiny, {2, 4});
    gpt_stage<backend>::stash s;
    CHECK_THROWS_WITH(first.forward(backend::matrix::Ones(3, 4), s), Catch::Contains("takes tokens"));
    CHECK_THROWS_WITH(later.forward(token_view{tokens, 2, 3}, s), Catch::Contains("only the first stage"));
    CHECK_THROWS_WITH(first.forward(token_view{tokens, 3, 2}, s), Catch::Contains("tokens.seq_len = 2"));
    CHECK_THROWS_WITH(first.forward(token_view{tokens, 1, 3}, s), Catch::Contains("rows * seq_len = 3"));
    CHECK_THROWS_WITH(first.forward(token_view{tokens, 0, 3}, s), Catch::Contains("tokens.rows = 0"));
    const std::vector<std::int32_t> bad{1, 2, 7, 4, 5, -1};
    CHECK_THROWS_WITH(first.forward(token_view{bad, 2, 3}, s), Catch::Contains("tokens.tokens[2] = 7"));
    CHECK(s.empty());
    CHECK_THROWS_WITH(later.forward(backend::matrix::Ones(4, 4), s),
                      Catch::Contains("x.rows() = 4") && Catch::Contains("seq_len = 3"));
    CHECK_THROWS_WITH(later.forward(backend::matrix::Ones(3, 5), s), Catch::Contains("x.cols() = 5"));
    CHECK_THROWS_WITH(later.backward_input(backend::matrix::Ones(3, 7), s), Catch::Contains("call forward first"));
    CHECK_THROWS_AS(later.backward_weight(s), weft::error);
    (void)later.forward(backend::matrix::Ones(3, 4), s);
    CHECK_THROWS_WITH(later.forward(backend::matrix::Ones(3, 4), s), Catch::Contains("must be empty"));
    CHECK_THROWS_WITH(later.backward_weight(s), Catch::Contains("backward_input"));
    CHECK_THROWS_WITH(later.backward_input(backend::matrix::Ones(3, 4), s), Catch::Contains("shape must be 3x7"));
    (void)later.backward_input(backend::matrix::Ones(3, 7), s);
    CHECK_THROWS_AS(later.backward_input(backend::matrix::Ones(3, 7), s), weft::error);
}
