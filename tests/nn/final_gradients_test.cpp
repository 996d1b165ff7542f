// The final-gradient ranges a stage's backward reports (nn/final_gradients.hpp), which the
// engine starts reducing while the backward goes on: for GPT and MLP stages of every kind
// (first, middle, last, whole), B and W report ranges that partition the gradient buffer,
// each already holding its final values when reported, and B computed layer by layer
// equals backward_input then backward_weight bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_backends.hpp"
#include "test_support.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/nn/gpt.hpp"
#include "weft/nn/mlp_stage.hpp"

namespace {

using weft::nn::gradient_range;

// What a backward reported: each range and the values it held at that moment.
struct reported {
    std::vector<gradient_range> ranges;
    std::vector<std::vector<float>> values;
};

template <class Stage>
auto recorder_of(Stage& stage, reported& out) {
    return [&stage, &out](gradient_range r) {
        out.ranges.push_back(r);
        const auto g = stage.gradients();
        out.values.emplace_back(g.begin() + std::ptrdiff_t(r.first), g.begin() + std::ptrdiff_t(r.last));
    };
}

// The ranges cover [0, size) once each, and each held its final values when reported.
template <class Stage>
void check_final(const Stage& stage, const reported& seen) {
    REQUIRE_FALSE(seen.ranges.empty());
    std::vector<gradient_range> sorted = seen.ranges;
    std::sort(sorted.begin(), sorted.end(), [](gradient_range a, gradient_range b) { return a.first < b.first; });
    std::size_t next = 0;
    for (const auto r : sorted) {
        CHECK(r.first == next);
        CHECK(r.last > r.first);
        next = r.last;
    }
    CHECK(next == stage.gradients().size());
    for (std::size_t k = 0; k < seen.ranges.size(); ++k) {
        const auto r = seen.ranges[k];
        const auto g = stage.gradients();
        CHECK(std::equal(g.begin() + std::ptrdiff_t(r.first), g.begin() + std::ptrdiff_t(r.last),
                         seen.values[k].begin()));
    }
}

template <class Span>
bool same_bits(const Span& a, const Span& b) {
    // memcmp must not see the null data of an empty span (a first stage's dx), even for 0 bytes.
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

std::vector<std::int32_t> some_tokens(std::size_t n, int vocab, std::string_view tag) {
    std::vector<std::int32_t> tokens(n);
    for (std::size_t i = 0; i < n; ++i) tokens[i] = std::int32_t(weft::rng::uniform(9, tag, i) * float(vocab)) % vocab;
    return tokens;
}

}  // namespace

TEST_CASE("gpt stages report each layer's gradients final, and B layer by layer equals I then W",
          "[nn][gpt][final_gradients]") {
    using backend = weft::exec::cpu;
    using stage_type = weft::nn::gpt_stage<backend>;
    const weft::nn::gpt_config config{.num_layers = 3, .d_model = 8, .num_heads = 2, .vocab_size = 13, .seq_len = 5};
    const int rows = 2 * config.seq_len;
    const auto tokens = some_tokens(std::size_t(rows), config.vocab_size, "tokens");
    const weft::nn::token_view batch{tokens, 2, config.seq_len};
    for (const weft::nn::unit_range units : {weft::nn::unit_range{0, 5}, weft::nn::unit_range{0, 2},
                                             weft::nn::unit_range{2, 4}, weft::nn::unit_range{3, 5}}) {
        INFO("units [" << units.first << ", " << units.last << ")");
        auto tensors_split = stage_type::initial_tensors(config, units);
        auto tensors_layered = stage_type::initial_tensors(config, units);
        auto tensors_w = stage_type::initial_tensors(config, units);
        stage_type split(weft_test::cpu, config, units, tensors_split);
        stage_type layered(weft_test::cpu, config, units, tensors_layered);
        stage_type by_w(weft_test::cpu, config, units, tensors_w);
        const auto x = weft_test::random_matrix<backend::matrix>(rows, config.d_model, "x");
        const auto dy = weft_test::random_matrix<backend::matrix>(rows, split.output_width(), "dy");
        const auto forward = [&](stage_type& stage, stage_type::stash& s) {
            return stage.is_first() ? stage.forward(batch, s) : stage.forward(x, s);
        };
        reported from_b, from_w;
        // Two micro-batches each, so that the reported values are sums the last one finished.
        for (int mb = 0; mb < 2; ++mb) {
            const bool last = mb == 1;
            stage_type::stash a, b, c;
            (void)forward(split, a);
            (void)forward(layered, b);
            (void)forward(by_w, c);
            const auto dx_split = split.backward_input(dy, a);
            split.backward_weight(a);
            const auto dx_layered = last ? layered.backward(dy, b, recorder_of(layered, from_b)) : layered.backward(dy, b);
            CHECK(same_bits(std::span(dx_split.data(), std::size_t(dx_split.size())),
                            std::span(dx_layered.data(), std::size_t(dx_layered.size()))));
            (void)by_w.backward_input(dy, c);
            if (last)
                by_w.backward_weight(c, recorder_of(by_w, from_w));
            else
                by_w.backward_weight(c);
        }
        CHECK(same_bits(split.gradients(), layered.gradients()));
        CHECK(same_bits(split.gradients(), by_w.gradients()));
        check_final(layered, from_b);
        check_final(by_w, from_w);
        // One range per layer the stage holds (the head shares wte's range on a whole model).
        CHECK(from_b.ranges.size() == std::size_t(units.last - units.first));
    }
}

TEST_CASE("mlp stages report each unit's gradients final, and B unit by unit equals I then W",
          "[nn][mlp][final_gradients]") {
    using backend = weft::exec::cpu;
    using stage_type = weft::nn::mlp_stage<backend>;
    const weft::nn::mlp_config config{.input_dim = 5, .hidden_dim = 8, .num_blocks = 3, .num_classes = 4};
    const int rows = 6;
    for (const weft::nn::unit_range units : {weft::nn::unit_range{0, config.num_units()}, weft::nn::unit_range{0, 2},
                                             weft::nn::unit_range{2, 4}, weft::nn::unit_range{3, config.num_units()}}) {
        INFO("units [" << units.first << ", " << units.last << ")");
        auto t1 = stage_type::initial_tensors(config, units);
        auto t2 = stage_type::initial_tensors(config, units);
        stage_type split(weft_test::cpu, config, units, t1);
        stage_type layered(weft_test::cpu, config, units, t2);
        const auto x = weft_test::random_matrix<backend::matrix>(rows, split.input_width(), "x");
        const auto dy = weft_test::random_matrix<backend::matrix>(rows, split.output_width(), "dy");
        reported seen;
        for (int mb = 0; mb < 2; ++mb) {
            stage_type::stash a, b;
            (void)split.forward(x, a);
            (void)layered.forward(x, b);
            const auto dx_split = split.backward_input(dy, a);
            split.backward_weight(a);
            const auto dx_layered = mb == 1 ? layered.backward(dy, b, recorder_of(layered, seen)) : layered.backward(dy, b);
            CHECK(same_bits(std::span(dx_split.data(), std::size_t(dx_split.size())),
                            std::span(dx_layered.data(), std::size_t(dx_layered.size()))));
        }
        CHECK(same_bits(split.gradients(), layered.gradients()));
        check_final(layered, seen);
        CHECK(seen.ranges.size() == std::size_t(units.last - units.first));
    }
}

TEST_CASE("ranges_outside cuts the excluded ranges out of a range", "[nn][final_gradients]") {
    using weft::nn::ranges_outside;
    const auto as_pairs = [](const std::vector<gradient_range>& v) {
        std::vector<std::pair<std::size_t, std::size_t>> out;
        for (const auto r : v) out.emplace_back(r.first, r.last);
        return out;
    };
    using pairs = std::vector<std::pair<std::size_t, std::size_t>>;
    CHECK(as_pairs(ranges_outside({0, 10}, {})) == pairs{{0, 10}});
    CHECK(as_pairs(ranges_outside({0, 10}, {{6, 8}, {2, 3}})) == pairs{{0, 2}, {3, 6}, {8, 10}});
    CHECK(as_pairs(ranges_outside({4, 10}, {{0, 5}, {9, 20}})) == pairs{{5, 9}});
    CHECK(ranges_outside({4, 10}, {{0, 20}}).empty());
    CHECK(as_pairs(ranges_outside({4, 10}, {{0, 2}, {12, 20}})) == pairs{{4, 10}});
}
