// The stage runner: F, B, I and W on one stage with no schedule. Two runners chained by hand
// compute what one runner over the whole model computes, bit for bit; B is I then W; the
// stash holds exactly the micro-batches between their forward and their W; misuse is an
// error naming the stage and micro-batch.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "training_run.hpp"
#include "weft/train/stage_runner.hpp"

namespace {

using runner = weft::train::stage_runner<weft::models::mlp, weft::exec::cpu>;
using weft_test::test_model;

weft::nn::flat_parameters<float> tensors_of(weft::nn::unit_range units) {
    return weft::nn::mlp_stage<weft::exec::cpu>::initial_tensors(test_model(), units);
}

bool bit_equal(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::span<const float> elements(const weft::exec::cpu::matrix& m) {
    return {m.data(), static_cast<std::size_t>(m.size())};
}

}  // namespace

TEST_CASE("chained runners compute what one whole-model runner computes", "[train][runner]") {
    weft::exec::cpu cpu;
    const int units = test_model().num_units();
    auto whole_tensors = tensors_of({0, units});
    auto first_tensors = tensors_of({0, 3});
    auto second_tensors = tensors_of({3, units});
    runner whole(0, cpu, test_model(), {0, units}, whole_tensors);
    runner first(0, cpu, test_model(), {0, 3}, first_tensors);
    runner second(1, cpu, test_model(), {3, units}, second_tensors);
    CHECK(first.is_first());
    CHECK_FALSE(first.is_last());
    CHECK(second.is_last());
    CHECK(&first.stage().tensors() == &first_tensors);  // the runner borrows, it does not copy

    const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
    const auto batch = data.batch(0, 8);
    for (int mb = 0; mb < 2; ++mb) {
        INFO("micro-batch " << mb);
        const auto logits = whole.forward(mb, batch, 4 * mb, 4);
        const auto chained = second.forward(mb, first.forward(mb, batch, 4 * mb, 4));
        CHECK(bit_equal(elements(logits), elements(chained)));
        const auto loss = whole.loss(logits, batch, 4 * mb, 4, 0.5f);
        const auto chained_loss = second.loss(chained, batch, 4 * mb, 4, 0.5f);
        CHECK(loss.loss == chained_loss.loss);
        // B on the whole model; I then W on the chain, W of the second stage last.
        CHECK(whole.backward(mb, loss.dlogits).size() == 0);
        auto grad = second.backward_input(mb, chained_loss.dlogits);
        CHECK(first.backward(mb, std::move(grad)).size() == 0);
        CHECK(second.stashed() == 1);  // its W has not run
        second.backward_weight(mb);
    }
    CHECK(whole.stashed() == 0);
    CHECK(first.stashed() == 0);
    CHECK(second.stashed() == 0);
    // Every tensor's accumulated gradient is the whole model's, bit for bit.
    for (const auto* part : {&first_tensors, &second_tensors})
        for (const auto& info : part->registry().entries()) {
            INFO(info.name);
            const auto& in_whole = whole_tensors.registry().find(info.name);
            CHECK(bit_equal(part->gradients().subspan(info.offset, info.size),
                            whole_tensors.gradients().subspan(in_whole.offset, in_whole.size)));
        }
}

TEST_CASE("the stash holds a micro-batch from its forward to its W, and misuse is named", "[train][runner]") {
    weft::exec::cpu cpu;
    auto tensors = tensors_of({3, test_model().num_units()});
    runner last(4, cpu, test_model(), {3, test_model().num_units()}, tensors);
    const weft::exec::cpu::matrix x = weft::exec::cpu::matrix::Ones(4, test_model().hidden_dim);
    const auto y = last.forward(0, x);
    const auto y2 = last.forward(1, x);
    CHECK(last.stashed() == 2);
    CHECK(last.stashed_bytes() > 0);
    CHECK_THROWS_WITH(last.forward(1, x), Catch::Contains("(stage 4, micro-batch 1)") &&
                                              Catch::Contains("forward twice"));
    CHECK_THROWS_WITH(last.backward_input(2, y), Catch::Contains("(stage 4, micro-batch 2)"));
    CHECK_THROWS_WITH(last.backward_weight(0), Catch::Contains("backward_weight"));  // W before I
    static_cast<void>(last.backward_input(0, y));
    last.backward_weight(0);
    CHECK(last.stashed() == 1);
    last.clear();  // a failed step's activations do not leak into the next
    CHECK(last.stashed() == 0);
    CHECK(last.stashed_bytes() == 0);
    static_cast<void>(y2);
}

namespace {

// A CPU backend that records actions as exec::cuda's graphs do, in what they ask of a runner:
// each F, B, I and W arrives as one action with its key, an action that takes a matrix gets
// the backend's own copy of it (doubled when `double_inputs`, to show the action computes
// from what the backend hands it), and a new runner makes the backend forget its stage.
struct recording_cpu : weft::exec::cpu {
    std::vector<weft::exec::action_key> keys;
    std::vector<int> forgotten;
    bool double_inputs = false;
    template <class Action>
    auto run_action(const weft::exec::action_key& key, Action&& action) {
        keys.push_back(key);
        return action();
    }
    template <class Input, class Action>
    auto run_action(const weft::exec::action_key& key, Input&& input, Action&& action) {
        keys.push_back(key);
        matrix own = input;
        if (double_inputs) own *= 2.0f;
        return action(std::move(own));
    }
    void forget_actions(int stage) { forgotten.push_back(stage); }
    void forget_all_actions() { forgotten.push_back(-1); }
};
static_assert(weft::exec::records_actions<recording_cpu>);

}  // namespace

TEST_CASE("each F, B, I and W reaches a recording backend as one action, keyed", "[train][runner]") {
    using weft::exec::action_part;
    using recorded_runner = weft::train::stage_runner<weft::models::mlp, recording_cpu>;
    weft::exec::cpu cpu;
    recording_cpu recording;
    const int units = test_model().num_units();
    auto plain_first = tensors_of({0, 3});
    auto plain_second = tensors_of({3, units});
    auto first_tensors = tensors_of({0, 3});
    auto second_tensors = tensors_of({3, units});
    runner plain_a(0, cpu, test_model(), {0, 3}, plain_first);
    runner plain_b(1, cpu, test_model(), {3, units}, plain_second);
    recorded_runner first(0, recording, test_model(), {0, 3}, first_tensors);
    recorded_runner second(1, recording, test_model(), {3, units}, second_tensors);
    CHECK(recording.forgotten == std::vector<int>{0, 1});

    const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
    const auto batch = data.batch(0, 8);
    const auto h = first.forward(1, batch, 4, 4);
    const auto logits = second.forward(1, h);
    const auto plain_logits = plain_b.forward(1, plain_a.forward(1, batch, 4, 4));
    CHECK(bit_equal(elements(logits), elements(plain_logits)));
    const auto loss = second.loss(logits, batch, 4, 4, 0.5f);
    auto grad = second.backward_input(1, loss.dlogits);
    second.backward_weight(1);
    CHECK(first.backward(1, std::move(grad)).size() == 0);
    const auto plain_loss = plain_b.loss(plain_logits, batch, 4, 4, 0.5f);
    CHECK(plain_a.backward(1, plain_b.backward(1, plain_loss.dlogits)).size() == 0);
    CHECK(bit_equal(first_tensors.gradients(), plain_first.gradients()));
    CHECK(bit_equal(second_tensors.gradients(), plain_second.gradients()));

    const std::vector<weft::exec::action_key> expected = {
        {.stage = 0, .part = action_part::forward, .microbatch = 1, .rows = 4},
        {.stage = 1, .part = action_part::forward, .microbatch = 1, .rows = 4},
        {.stage = 1, .part = action_part::backward_input, .microbatch = 1, .rows = 4},
        {.stage = 1, .part = action_part::backward_weight, .microbatch = 1, .rows = 0},
        {.stage = 0, .part = action_part::backward, .microbatch = 1, .rows = 4},
    };
    CHECK(recording.keys == expected);
    CHECK(first.stashed() == 0);
    CHECK(second.stashed() == 0);

    // The action computes from the backend's copy of its input, not the caller's.
    recording.double_inputs = true;
    const weft::exec::cpu::matrix doubled = 2.0f * h;
    const auto from_copy = second.forward(2, h);
    const auto from_doubled = plain_b.forward(2, doubled);
    CHECK(bit_equal(elements(from_copy), elements(from_doubled)));
    CHECK_FALSE(bit_equal(elements(from_copy), elements(plain_b.forward(3, h))));
    second.discard(2);
    plain_b.discard(2);
    plain_b.discard(3);
}
