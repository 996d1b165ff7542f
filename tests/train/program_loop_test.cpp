// The program loop on its own, without an engine: a lowered schedule over two ranks' stage
// runners on threads computes the losses and gradients of one runner holding the whole
// model, hands every stage-wide action to its caller in program order, and refuses a
// program that leaves activations behind or was never lowered.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <mutex>
#include <string>
#include <vector>

#include "posting_order_comm.hpp"
#include "training_run.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/shard_actions.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/train/program_loop.hpp"

namespace {

using weft::comm::local;
using weft_test::test_model;
using loop_type = weft::train::program_loop<weft::models::mlp, weft::exec::cpu, local>;
using runner = loop_type::runner;

// Records the stage-wide actions and compute hooks the loop hands over.
struct recorder {
    std::vector<std::string> calls;
    int computes = 0;
    void reduce_grad(int s) { calls.push_back(std::to_string(s) + "REDUCE_GRAD"); }
    void unshard(int s) { calls.push_back(std::to_string(s) + "UNSHARD"); }
    void reshard(int s) { calls.push_back(std::to_string(s) + "RESHARD"); }
    void before_compute(int) { ++computes; }
};
static_assert(weft::train::stage_actions<recorder>);

struct rank_outcome {
    double loss = 0;
    std::vector<std::string> calls;
    int computes = 0;
    std::size_t peak_stashed = 0;
    std::map<std::string, std::vector<float>> gradients;
};

}  // namespace

TEST_CASE("a lowered two-rank program over runners equals one runner over the whole model", "[train][loop]") {
    constexpr int microbatches = 4, rows = 2;
    const int units = test_model().num_units();
    const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
    const auto batch = data.batch(0, microbatches * rows);
    const weft::sched::shard_action_options stage_wide{.reduce_grad = true, .unshard = true};
    const auto program = weft::sched::add_shard_actions(
        weft::sched::lower(weft::sched::one_f_one_b::generate({.ranks = 2, .microbatches = microbatches})), stage_wide);
    const std::vector<weft::nn::unit_range> parts{{0, 4}, {4, units}};

    std::vector<rank_outcome> ranks(2);
    local::run(2, [&](local& pipeline) {
        const int me = pipeline.rank();
        weft::exec::cpu cpu;
        auto tensors = weft::nn::mlp_stage<weft::exec::cpu>::initial_tensors(test_model(), parts[std::size_t(me)]);
        std::map<int, runner> runners;
        runners.try_emplace(me, me, cpu, test_model(), parts[std::size_t(me)], tensors);
        loop_type loop(program, me, test_model(), rows, 2);
        recorder actions;
        const auto report = loop.run(batch, 0, runners, pipeline, actions);
        auto& out = ranks[std::size_t(me)];
        out.loss = report.loss_sum;
        out.calls = actions.calls;
        out.computes = actions.computes;
        out.peak_stashed = report.peak_stashed;
        for (const auto& info : tensors.registry().entries())
            out.gradients[info.name].assign(tensors.gradients().begin() + std::ptrdiff_t(info.offset),
                                            tensors.gradients().begin() + std::ptrdiff_t(info.offset + info.size));
    });

    // The same micro-batches through one runner, in order (1F1B accumulates each stage's
    // weight gradients in micro-batch order too, so the sums agree bit for bit).
    weft::exec::cpu cpu;
    auto whole_tensors = weft::nn::mlp_stage<weft::exec::cpu>::initial_tensors(test_model(), {0, units});
    runner whole(0, cpu, test_model(), {0, units}, whole_tensors);
    double loss = 0;
    for (int mb = 0; mb < microbatches; ++mb) {
        const auto out = whole.forward(mb, batch, mb * rows, rows);
        const auto l = whole.loss(out, batch, mb * rows, rows, 1.0f / microbatches);
        loss += double(l.loss) / microbatches;
        static_cast<void>(whole.backward(mb, l.dlogits));
    }
    CHECK(ranks[1].loss == loss);  // the last stage's rank reports the loss
    CHECK(ranks[0].loss == 0);
    for (const auto& r : ranks)
        for (const auto& [name, grads] : r.gradients) {
            INFO(name);
            const auto& info = whole_tensors.registry().find(name);
            const std::vector<float> expected(whole_tensors.gradients().begin() + std::ptrdiff_t(info.offset),
                                              whole_tensors.gradients().begin() +
                                                  std::ptrdiff_t(info.offset + info.size));
            CHECK(grads == expected);
        }
    // Each rank's stage-wide actions, in its program's order; one hook per compute action.
    for (int me = 0; me < 2; ++me) {
        INFO("rank " << me);
        std::vector<std::string> expected;
        int computes = 0;
        for (const auto& a : program.ranks[std::size_t(me)]) {
            if (weft::sched::is_compute(a.kind)) ++computes;
            else if (!weft::sched::has_microbatch(a.kind)) expected.push_back(weft::sched::to_string(a));
        }
        CHECK(ranks[std::size_t(me)].calls == expected);
        CHECK(ranks[std::size_t(me)].computes == computes);
        CHECK_FALSE(expected.empty());
    }
    // The most activations a rank held is the simulator's peak for this schedule.
    const auto simulated = weft::sched::simulate(weft::sched::lower(weft::sched::one_f_one_b::generate(
        {.ranks = 2, .microbatches = microbatches})));
    for (int me = 0; me < 2; ++me)
        CHECK(ranks[std::size_t(me)].peak_stashed == std::size_t(simulated.peak_activations[std::size_t(me)]));
}

TEST_CASE("the loop refuses a program that is not lowered or leaves activations behind", "[train][loop]") {
    weft::sched::program compute_only;
    compute_only.num_ranks = 1;
    compute_only.num_stages = 1;
    compute_only.num_microbatches = 1;
    compute_only.stage_rank = {0};
    compute_only.ranks = {{{weft::sched::action_kind::F, 0, 0}, {weft::sched::action_kind::I, 0, 0}}};
    CHECK_THROWS_WITH(loop_type(compute_only, 0, test_model(), 2, 1), Catch::Contains("lowered"));
    // One rank needs no messages: marked lowered as it is (lower() itself would refuse the
    // missing W; the engine checks programs, the loop runs what it is given).
    weft::sched::program lowered = compute_only;
    lowered.lowered = true;
    CHECK_THROWS_WITH(loop_type(lowered, 1, test_model(), 2, 1), Catch::Contains("pipeline rank = 1"));

    // F and I but no W: the micro-batch's activations would outlive the step.
    std::string message;
    local::run(1, [&](local& pipeline) {
        weft::exec::cpu cpu;
        const int units = test_model().num_units();
        auto tensors = weft::nn::mlp_stage<weft::exec::cpu>::initial_tensors(test_model(), {0, units});
        std::map<int, runner> runners;
        runners.try_emplace(0, 0, cpu, test_model(), weft::nn::unit_range{0, units}, tensors);
        loop_type loop(lowered, 0, test_model(), 2, 1);
        recorder actions;
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        try {
            loop.run(data.batch(0, 2), 0, runners, pipeline, actions);
        } catch (const weft::error& e) {
            message = e.what();
        }
    });
    CHECK_THAT(message, Catch::Matchers::Contains("left 1 micro-batches stashed"));
}

// Over a communicator that pairs messages in posting order (NCCL's rule), a program whose
// receives come in another order than its sends would hand one micro-batch's data to another.
TEST_CASE("over a communicator without tags the loop refuses messages out of order", "[train][loop]") {
    using untagged_loop = weft::train::program_loop<weft::models::mlp, weft::exec::cpu,
                                                    weft_test::posting_order<local>>;
    using enum weft::sched::action_kind;
    weft::sched::program swapped = weft::sched::gpipe::generate(2, 2);
    swapped.ranks[1] = {{F, 1, 1}, {F, 1, 0}, {B, 1, 0}, {B, 1, 1}};  // micro-batch 1 first
    const auto lowered = weft::sched::lower(swapped);
    CHECK_NOTHROW(loop_type(lowered, 0, test_model(), 2, 1));  // tags pick the right message
    CHECK_THROWS_WITH(untagged_loop(lowered, 0, test_model(), 2, 1),
                      Catch::StartsWith("weft: program: its messages are out of order for a communicator that pairs them "
                                        "in posting order") &&
                          Catch::Contains("the 1st send is rank 0, index 1 (0SEND_F0) but the 1st receive is rank 1, "
                                          "index 0 (1RECV_F1)"));

    // Two routes on one such communicator: refused at run(), before any message. So is a
    // channel count other than the program's.
    std::string message, count_message;
    local::run(2, [&](local& world) {
        weft_test::posting_order<local> pipeline(world.split(0, world.rank()));
        const int me = pipeline.rank();
        weft::exec::cpu cpu;
        const std::vector<weft::nn::unit_range> parts{{0, 4}, {4, test_model().num_units()}};
        auto tensors = weft::nn::mlp_stage<weft::exec::cpu>::initial_tensors(test_model(), parts[std::size_t(me)]);
        std::map<int, untagged_loop::runner> runners;
        runners.try_emplace(me, me, cpu, test_model(), parts[std::size_t(me)], tensors);
        untagged_loop loop(weft::sched::lower(weft::sched::gpipe::generate(2, 2)), me, test_model(), 2, 1);
        recorder actions;
        const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
        // GPipe on 2 ranks has two routes (activations 0 -> 1, gradients 1 -> 0), which share
        // both ranks: two channels.
        const std::vector<weft_test::posting_order<local>*> twice(2, &pipeline);
        try {
            loop.run(data.batch(0, 4), 0, runners, std::span(twice), actions);
        } catch (const weft::error& e) {
            if (me == 0) message = e.what();
        }
        try {
            loop.run(data.batch(0, 4), 0, runners, std::span(twice).first(1), actions);
        } catch (const weft::error& e) {
            if (me == 0) count_message = e.what();
        }
    });
    CHECK_THAT(message, Catch::Matchers::StartsWith("weft: channel 1 = \"channel 0's communicator\" is invalid: must "
                                                    "be a communicator of its own"));
    CHECK_THAT(count_message, Catch::Matchers::StartsWith("weft: channels = 1 is invalid: must be this program's "
                                                          "channel_count() = 2"));
}

namespace {

// Also hears of finished gradient ranges (the final ones, on a stage's last backward, apart),
// and notes them among the stage-wide actions.
struct final_gradients_recorder : recorder {
    std::map<int, std::vector<weft::nn::gradient_range>> ranges;  // final
    std::map<int, int> every_microbatch;                         // all reports, final or not
    void gradients_final(int s, weft::nn::gradient_range r, bool last) {
        ++every_microbatch[s];
        if (!last) return;
        ranges[s].push_back(r);
        calls.push_back(std::to_string(s) + "FINAL");
    }
};
static_assert(weft::train::hears_final_gradients<final_gradients_recorder>);

}  // namespace

// The data-parallel reduction's overlap with the backward rests on this: on each stage's last
// B or W of the step the loop hands over each unit's gradient range as final, before the
// stage's REDUCE_GRAD, and together they cover the stage's buffer once. ZeRO's per-micro-batch
// reduction rests on the other reports: every micro-batch's backward hands each unit over.
TEST_CASE("the loop hands over each unit's gradients per backward, final on a stage's last", "[train][loop]") {
    constexpr int microbatches = 4, rows = 2;
    const int units = test_model().num_units();
    const std::vector<weft::nn::unit_range> parts{{0, 4}, {4, units}};
    const weft::data::synthetic_dataset data(test_model().input_dim, test_model().num_classes, 7);
    const auto batch = data.batch(0, microbatches * rows);
    const weft::sched::shard_action_options stage_wide{.reduce_grad = true, .unshard = false};
    for (const bool split_backward : {false, true}) {
        INFO((split_backward ? "zb-h1 (I and W)" : "1f1b (B)"));
        const auto compute_only = split_backward ? weft::sched::zb_h1::generate({.ranks = 2, .microbatches = microbatches})
                                                 : weft::sched::one_f_one_b::generate({.ranks = 2, .microbatches = microbatches});
        const auto program = weft::sched::add_shard_actions(weft::sched::lower(compute_only), stage_wide);
        std::vector<final_gradients_recorder> heard(2);
        std::vector<std::size_t> sizes(2);
        local::run(2, [&](local& pipeline) {
            const int me = pipeline.rank();
            weft::exec::cpu cpu;
            auto tensors = weft::nn::mlp_stage<weft::exec::cpu>::initial_tensors(test_model(), parts[std::size_t(me)]);
            std::map<int, runner> runners;
            runners.try_emplace(me, me, cpu, test_model(), parts[std::size_t(me)], tensors);
            loop_type loop(program, me, test_model(), rows, 2);
            loop.run(batch, 0, runners, pipeline, heard[std::size_t(me)]);
            sizes[std::size_t(me)] = tensors.gradients().size();
        });
        for (int me = 0; me < 2; ++me) {
            INFO("rank " << me);
            const auto& r = heard[std::size_t(me)];
            // One final range per unit, and one report per unit from every micro-batch's backward.
            const auto& ranges = r.ranges.at(me);
            const int stage_units = parts[std::size_t(me)].last - parts[std::size_t(me)].first;
            CHECK(ranges.size() == std::size_t(stage_units));
            CHECK(r.every_microbatch.at(me) == microbatches * stage_units);
            std::size_t covered = 0;
            for (const auto range : ranges) covered += range.size();
            CHECK(covered == sizes[std::size_t(me)]);
            // All of them before the stage's REDUCE_GRAD.
            const auto reduce = std::find(r.calls.begin(), r.calls.end(), std::to_string(me) + "REDUCE_GRAD");
            REQUIRE(reduce != r.calls.end());
            CHECK(std::count(reduce, r.calls.end(), std::to_string(me) + "FINAL") == 0);
        }
    }
}
