// A SWARM stage's calls without a transport: a repeated backward counts once, a call from
// another step is refused, collecting needs the contribution kept, and a stage's state
// handed over in chunks makes an identical worker.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "weft/swarm/stage_service.hpp"

using namespace weft::swarm;

namespace {
const weft::nn::gpt_config model{.num_layers = 2, .d_model = 16, .num_heads = 2, .vocab_size = 32, .seq_len = 4,
                                 .seed = 3};
const weft::optim::optimizer_options adamw{.kind = weft::optim::optimizer_kind::adamw, .lr = 1e-2,
                                           .weight_decay = 0.1};

stage_input tokens_input(int rows, int offset) {
    stage_input in;
    in.rows = rows;
    for (int i = 0; i < rows * model.seq_len; ++i) in.tokens.push_back((i * 7 + offset) % model.vocab_size);
    return in;
}
// A whole model on one stage: tokens in, loss out.
stage_service whole_model() {
    const auto units = swarm_stage_units(model, 1);
    return stage_service(model, 0, 1, units[0], adamw);
}
std::vector<std::int32_t> targets(int rows) {
    std::vector<std::int32_t> t;
    for (int i = 0; i < rows * model.seq_len; ++i) t.push_back((i * 5 + 1) % model.vocab_size);
    return t;
}
}  // namespace

TEST_CASE("a backward served twice counts once; contributions sum in micro-batch order", "[swarm][service]") {
    auto s = whole_model();
    const auto r0 = s.backward(0, 0, tokens_input(2, 0), {}, targets(2), 0.5);
    const auto once = s.collect(0, {0});
    const auto again = s.backward(0, 0, tokens_input(2, 0), {}, targets(2), 0.5);  // a retried call
    CHECK(again.loss == r0.loss);
    CHECK(s.collect(0, {0}) == once);  // replaced, not added
    static_cast<void>(s.backward(0, 1, tokens_input(2, 1), {}, targets(2), 0.5));
    const auto both = s.collect(0, {1, 0});
    const auto second = s.collect(0, {1});
    std::size_t differing = 0;
    for (std::size_t i = 0; i < both.size(); ++i) {
        CHECK(both[i] == once[i] + second[i]);
        differing += once[i] != 0 ? 1 : 0;
    }
    CHECK(differing > both.size() / 2);  // a real gradient, not zeros
    CHECK_THROWS_AS(s.collect(0, {2}), call_refused);
    CHECK_THROWS_WITH(s.collect(0, {0, 0}), Catch::Contains("must name each micro-batch once"));
}

TEST_CASE("a call from another step is refused, never applied", "[swarm][service]") {
    auto s = whole_model();
    static_cast<void>(s.backward(0, 0, tokens_input(2, 0), {}, targets(2), 1.0));
    const auto g = s.collect(0, {0});
    s.apply(0, 1e-2, 1.0, g);
    CHECK(s.step() == 1);
    CHECK(s.kept_contributions() == 0);
    CHECK_THROWS_WITH(s.backward(0, 0, tokens_input(2, 0), {}, targets(2), 1.0),
                      Catch::Contains("backward of step 0 refused") && Catch::Contains("older step"));
    CHECK_THROWS_AS(s.forward(2, tokens_input(1, 0)), call_refused);
    CHECK_THROWS_AS(s.apply(0, 1e-2, 1.0, g), call_refused);
}

TEST_CASE("state fetched in chunks makes an identical worker", "[swarm][service]") {
    const auto units = swarm_stage_units(model, 2);
    stage_service donor(model, 1, 2, units[1], adamw);
    stage_input in;
    in.rows = 1;
    in.activations.assign(std::size_t(model.seq_len) * model.d_model, 0.25f);
    for (std::uint64_t step = 0; step < 2; ++step) {
        static_cast<void>(donor.backward(step, 0, in, {}, targets(1), 1.0));
        donor.apply(step, 1e-2, 1.0, donor.collect(step, {0}));
    }
    stage_service joiner(model, 1, 2, units[1], adamw);
    const state_manifest m = donor.manifest();
    CHECK(m.step == 2);
    CHECK(m.optimizer_tensors.size() == 2);  // exp_avg, exp_avg_sq
    joiner.begin_restore(m);
    const std::uint64_t chunk = 1000;  // not a divisor: the last chunk is short
    for (std::uint64_t at = 0; at < m.total(); at += chunk)
        joiner.write_state(at, donor.read_state(at, std::min(chunk, m.total() - at)));
    joiner.finish_restore();
    CHECK(joiner.step() == 2);
    CHECK(joiner.manifest() == m);
    CHECK(joiner.read_state(0, m.total()) == donor.read_state(0, m.total()));
    // Both step with the same gradient and stay identical (AdamW's step count came along).
    static_cast<void>(donor.backward(2, 0, in, {}, targets(1), 1.0));
    const auto g = donor.collect(2, {0});
    donor.apply(2, 1e-2, 0.5, g);
    joiner.apply(2, 1e-2, 0.5, g);
    CHECK(joiner.read_state(0, m.total()) == donor.read_state(0, m.total()));
    CHECK_THROWS_WITH(joiner.read_state(m.total(), 1), Catch::Contains("must lie within the state"));
}

TEST_CASE("a stage count the model cannot be cut into names --stages", "[swarm][service]") {
    CHECK(swarm_stage_units(model, 4).size() == 4);
    CHECK_THROWS_WITH(swarm_stage_units(model, 5),
                      Catch::Contains("--stages = 5 is invalid") && Catch::Contains("the model's 4 units"));
    CHECK_THROWS_WITH(swarm_stage_units(model, 0), Catch::Contains("--stages = 0 is invalid"));
}
