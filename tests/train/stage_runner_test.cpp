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
