// The engine under every sharding policy, on threads: ZeRO-1/2/3 train exactly what plain
// data parallelism trains (comm::local sums in rank order, so bit for bit), the memory
// report equals shard::zero_memory_of, and checkpoints move between layouts.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "scratch_dir.hpp"
#include "relative_difference.hpp"
#include "weft/comm/local.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/dualpipev.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/interleaved.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/sched/zbv.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/shard/zero.hpp"
#include "weft/shard/zero_memory.hpp"
#include "weft/train/engine.hpp"
#include "weft/train/recompute.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/models/gpt.hpp"

namespace {

using weft_test::relative_difference;

using weft::comm::local;
template <class Sharding>
using typed_engine = weft::train::engine<weft::sched::one_f_one_b, Sharding, local, weft::exec::cpu>;
// One engine type for every ZeRO stage (any_zero) and the schedules used here keeps this
// file's build time down; the typed policies are checked on their own below.
using gpt_engine = weft::train::engine<weft::sched::any_of<weft::sched::one_f_one_b, weft::sched::zb_h1,
                                                           weft::sched::interleaved, weft::sched::gpipe,
                                                           weft::sched::zbv, weft::sched::dualpipev>,
                                       weft::shard::any_zero, local, weft::exec::cpu, weft::models::gpt>;

constexpr int batch_rows = 8;

weft::nn::gpt_config model() {
    return {.num_layers = 4, .d_model = 16, .num_heads = 2, .vocab_size = 24, .seq_len = 4, .seed = 3};
}

weft::train::engine_options options(bool overlap_reduce = true) {
    return {.batch_size = batch_rows,
            .optimizer = {.kind = weft::optim::optimizer_kind::adamw, .lr = 1e-2, .weight_decay = 0.1},
            .bucket_elements = 500,
            .overlap_reduce = overlap_reduce};
}

weft::data::token_batch batch(int step) {
    weft::data::token_batch b{batch_rows, model().seq_len, {}, {}};
    for (int i = 0; i < batch_rows * model().seq_len; ++i) {
        b.inputs.push_back((i * 5 + step * 7 + i / 3) % model().vocab_size);
        b.targets.push_back((i * 3 + step + 2) % model().vocab_size);
    }
    return b;
}

struct run_result {
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> tensors;  // every stage's full tensors, from all ranks
    std::vector<std::string> memory_mismatches;
    std::vector<bool> has_unshard;  // per rank: the program holds UNSHARD actions
};

struct layout {
    int pp = 1, dp = 1;
    weft::schedule_kind schedule = weft::sched::one_f_one_b::kind;
    int tp = 1;
    [[nodiscard]] int world() const { return pp * dp * tp; }
    [[nodiscard]] weft::parallel_config config(int zero) const {
        const int chunks = schedule.default_chunks();
        return weft::parallel_config({.pp = pp,
                                      .dp = dp,
                                      .tp = tp,
                                      .zero_stage = zero,
                                      .microbatches = 2 * pp,
                                      .chunks = chunks,
                                      .schedule = schedule,
                                      .world_size = world()});
    }
};

// The trained weights by tensor name, from the rank of data- and tensor-parallel index 0 (the
// replicas hold the same; `full` is gather_full_stages(engine)). Under the caller's lock.
template <class Engine, class FullStages>
void keep_weights(const Engine& engine, const FullStages& full, std::map<std::string, std::vector<float>>& into) {
    if (engine.parts().coordinates().dp_index != 0 || engine.parts().coordinates().tp_index != 0) return;
    for (const auto& f : full)
        for (const auto& info : f.registry.entries())
            into[info.name].assign(f.parameters.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                   f.parameters.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
}

// Steps [first, last) on `layout`, loading `load_from` first and saving to `save_to` after,
// when given.
run_result train_zero(int zero, const layout& l, int first, int last, const std::filesystem::path& load_from = {},
                      const std::filesystem::path& save_to = {}, bool overlap_reduce = true) {
    run_result out;
    std::mutex mutex;
    out.has_unshard.resize(static_cast<std::size_t>(l.world()));
    local::run(l.world(), [&](local& world) {
        gpt_engine engine(world, l.config(zero), model(), options(overlap_reduce));
        if (!load_from.empty()) weft::train::load(engine, load_from);
        std::vector<double> losses;
        for (int step = first; step < last; ++step) losses.push_back(engine.step(batch(step)).loss);
        if (!save_to.empty()) weft::train::save(engine, save_to);
        // The memory report against the formula, stage by stage summed.
        weft::shard::memory_figures between, peak;
        for (const int s : engine.parts().local_stages()) {
            const auto expected =
                weft::shard::zero_memory_of(zero, engine.parts().stage(s).registry().total_size(), l.dp,
                                            engine.parts().coordinates().dp_index, 2, sizeof(float));
            between = between + expected.between_steps;
            peak = peak + expected.peak;
        }
        const auto report = engine.memory();
        std::vector<std::string> mismatches;
        auto compare = [&](const char* what, std::size_t got, std::size_t want) {
            if (got != want)
                mismatches.push_back("rank " + std::to_string(world.rank()) + " " + what + ": " + std::to_string(got) +
                                     " bytes, formula " + std::to_string(want));
        };
        compare("parameters between steps", report.between_steps.parameters, between.parameters);
        compare("gradients between steps", report.between_steps.gradients, between.gradients);
        compare("optimizer state", report.between_steps.optimizer_state, between.optimizer_state);
        compare("peak parameters", report.peak.parameters, peak.parameters);
        compare("peak gradients", report.peak.gradients, peak.gradients);
        if (report.peak_activations == 0) mismatches.push_back("no activations reported");
        bool unshard = false;
        for (const auto& a : engine.parts().program().ranks[static_cast<std::size_t>(engine.parts().pipeline_rank())])
            unshard = unshard || a.kind == weft::sched::action_kind::UNSHARD;
        const auto full = weft::train::gather_full_stages(engine);
        std::lock_guard lock(mutex);
        out.has_unshard[static_cast<std::size_t>(world.rank())] = unshard;
        if (world.rank() == 0) out.losses = losses;
        out.memory_mismatches.insert(out.memory_mismatches.end(), mismatches.begin(), mismatches.end());
        keep_weights(engine, full, out.tensors);
    });
    return out;
}


}  // namespace

TEST_CASE("ZeRO-1/2/3 train exactly what plain data parallelism trains", "[train][shard]") {
    const layout l =
        GENERATE(layout{1, 4, weft::sched::one_f_one_b::kind}, layout{2, 2, weft::sched::zb_h1::kind},
                 layout{2, 2, weft::sched::interleaved::kind}, layout{1, 2, weft::sched::one_f_one_b::kind, 2});
    INFO("pp " << l.pp << " dp " << l.dp << " tp " << l.tp << " " << weft::to_string(l.schedule));
    const run_result replicated = train_zero(0, l, 0, 3);
    CHECK(replicated.memory_mismatches.empty());
    for (int zero = 1; zero <= 3; ++zero) {
        INFO("zero " << zero);
        const run_result sharded = train_zero(zero, l, 0, 3);
        CHECK(sharded.losses == replicated.losses);
        REQUIRE(sharded.tensors.size() == replicated.tensors.size());
        for (const auto& [name, values] : replicated.tensors) {
            INFO(name);
            CHECK(sharded.tensors.at(name) == values);
        }
        for (const auto& m : sharded.memory_mismatches) FAIL_CHECK(m);
        for (const bool unshard : sharded.has_unshard) CHECK(unshard == (zero == 3));
    }
}

// Reducing each layer as the last backward finishes it (tied wte copies after their sum)
// averages the same sums as reducing each stage at its REDUCE_GRAD: the same bits.
TEST_CASE("reductions overlapping the backward train exactly what REDUCE_GRAD's reductions train", "[train][shard]") {
    const layout l = GENERATE(layout{1, 2, weft::sched::one_f_one_b::kind}, layout{2, 2, weft::sched::zb_h1::kind},
                              layout{2, 2, weft::sched::interleaved::kind}, layout{1, 4, weft::sched::one_f_one_b::kind});
    INFO("pp " << l.pp << " dp " << l.dp << " " << weft::to_string(l.schedule));
    const run_result at_reduce_grad = train_zero(0, l, 0, 3, {}, {}, false);
    const run_result overlapped = train_zero(0, l, 0, 3, {}, {}, true);
    CHECK(overlapped.losses == at_reduce_grad.losses);
    REQUIRE(overlapped.tensors.size() == at_reduce_grad.tensors.size());
    for (const auto& [name, values] : at_reduce_grad.tensors) {
        INFO(name);
        CHECK(overlapped.tensors.at(name) == values);
    }
}

namespace {

// What a run under `reduce` says of its memory and traffic, the most of any rank.
struct zero_reduce_run {
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> tensors;
    std::size_t peak = 0;  // the state peak in step: parameters, gradients, optimizer state
    weft::shard::collective_traffic traffic;
};

zero_reduce_run train_reduce(int zero, const layout& l, weft::shard::zero_reduce reduce) {
    zero_reduce_run out;
    std::mutex mutex;
    local::run(l.world(), [&](local& world) {
        auto o = options();
        o.zero_reduce = reduce;
        gpt_engine engine(world, l.config(zero), model(), o);
        std::vector<double> losses;
        for (int step = 0; step < 3; ++step) losses.push_back(engine.step(batch(step)).loss);
        const auto report = engine.memory();
        const auto full = weft::train::gather_full_stages(engine);
        std::lock_guard lock(mutex);
        if (world.rank() == 0) out.losses = losses;
        out.peak = std::max(out.peak, report.peak.total());
        out.traffic.gathered_bytes = std::max(out.traffic.gathered_bytes, report.traffic.gathered_bytes);
        out.traffic.reduced_bytes = std::max(out.traffic.reduced_bytes, report.traffic.reduced_bytes);
        keep_weights(engine, full, out.tensors);
    });
    return out;
}

}  // namespace

// ZeRO's least-memory mode: each layer's gradients reduced as each micro-batch's backward
// finishes them, ZeRO-3's parameters gathered layer by layer. The sums run micro-batch by
// micro-batch, so the trained values equal the per-step mode's within rounding; the state
// held in the step is ordered ZeRO-3 < ZeRO-2 < ZeRO-1 < ZeRO-0, and the traffic is more.
TEST_CASE("ZeRO per micro-batch trains what per step trains, in less memory", "[train][shard]") {
    const layout l = GENERATE(layout{1, 2, weft::sched::one_f_one_b::kind}, layout{1, 4, weft::sched::one_f_one_b::kind},
                              layout{2, 2, weft::sched::zb_h1::kind}, layout{2, 2, weft::sched::interleaved::kind},
                              layout{2, 2, weft::sched::zbv::kind});
    INFO("pp " << l.pp << " dp " << l.dp << " " << weft::to_string(l.schedule));
    using weft::shard::zero_reduce;
    std::map<int, zero_reduce_run> per_step, per_microbatch;
    for (int zero = 0; zero <= 3; ++zero) per_step[zero] = train_reduce(zero, l, zero_reduce::step);
    for (int zero = 2; zero <= 3; ++zero) per_microbatch[zero] = train_reduce(zero, l, zero_reduce::microbatch);
    for (int zero = 2; zero <= 3; ++zero) {
        INFO("zero " << zero);
        const auto& step = per_step.at(zero);
        const auto& micro = per_microbatch.at(zero);
        REQUIRE(micro.losses.size() == step.losses.size());
        for (std::size_t i = 0; i < step.losses.size(); ++i)
            CHECK(std::abs(micro.losses[i] - step.losses[i]) <= 1e-5 * std::abs(step.losses[i]));
        // AdamW scales each element's step by its own gradient's size: where the gradient is
        // rounding noise (the attention's key bias has none: softmax ignores a shift common
        // to a row), another order of the same sums moves that element by up to the learning
        // rate. So the weights agree less closely than the losses.
        REQUIRE(micro.tensors.size() == step.tensors.size());
        for (const auto& [name, values] : step.tensors) {
            INFO(name);
            CHECK(relative_difference(micro.tensors.at(name), values) < 1e-3);
        }
        // A reduction per layer and micro-batch sends more than one per step.
        CHECK(micro.traffic.reduced_bytes > step.traffic.reduced_bytes);
    }
    INFO("state peak in step: ZeRO-0 " << per_step[0].peak << ", ZeRO-1 " << per_step[1].peak << ", ZeRO-2 "
                                       << per_microbatch[2].peak << ", ZeRO-3 " << per_microbatch[3].peak
                                       << " bytes (per step: ZeRO-2 " << per_step[2].peak << ", ZeRO-3 "
                                       << per_step[3].peak << ")");
    // Per micro-batch, ZeRO-3 holds its range and the layers in use (about two), ZeRO-2 the
    // layers whose reduction is in flight: below the stage only where a stage has more layers
    // than that, as the one stage of this 4-layer model has.
    if (l.pp == 1) {
        CHECK(per_microbatch[3].peak < per_microbatch[2].peak);
        CHECK(per_microbatch[2].peak < per_step[1].peak);
        CHECK(per_step[1].peak < per_step[0].peak);
        CHECK(per_microbatch[3].peak < per_step[3].peak);
    }
    // Two chunks per rank leave one block per stage here, all of it in flight at once.
    if (l.schedule.default_chunks() == 1) CHECK(per_microbatch[2].peak < per_step[2].peak);
}

TEST_CASE("a checkpoint saved under one layout continues under any other", "[train][shard][checkpoint]") {
    const weft_test::scratch_dir dir("engine_sharding");
    const auto path = dir.path / "zero.safetensors";
    // Uninterrupted: 3 steps at pp 2, dp 2, ZeRO-3 (and at pp 1, dp 2, tp 2: slices too).
    const layout saved =
        GENERATE(layout{2, 2, weft::sched::one_f_one_b::kind}, layout{1, 2, weft::sched::one_f_one_b::kind, 2});
    INFO("saved at pp " << saved.pp << " dp " << saved.dp << " tp " << saved.tp);
    const run_result straight = train_zero(3, saved, 0, 3);
    train_zero(3, saved, 0, 2, {}, path);
    // The same layout under another ZeRO stage: bit for bit the uninterrupted run.
    const run_result resumed = train_zero(1, saved, 2, 3, path);
    CHECK(resumed.losses.front() == straight.losses.back());
    for (const auto& [name, values] : straight.tensors) {
        INFO(name);
        CHECK(resumed.tensors.at(name) == values);
    }
    // Other layouts: the same step within rounding (sums run in another order).
    for (const auto& [other, zero] : {std::pair{layout{1, 4, weft::sched::one_f_one_b::kind}, 2},
                                      std::pair{layout{4, 1, weft::sched::zb_h1::kind}, 0},
                                      std::pair{layout{1, 1, weft::sched::one_f_one_b::kind}, 3},
                                      std::pair{layout{2, 1, weft::sched::interleaved::kind, 2}, 1}}) {
        INFO("resumed at pp " << other.pp << " dp " << other.dp << " tp " << other.tp << " zero " << zero);
        const run_result moved = train_zero(zero, other, 2, 3, path);
        CHECK(std::abs(moved.losses.front() - straight.losses.back()) <= 1e-5 * std::abs(straight.losses.back()));
        // AdamW divides by sqrt(v): an element whose gradient is rounding noise around zero
        // moves by a noise-sized fraction of lr whatever its scale. The attention key bias
        // has such a gradient (softmax ignores a constant added to a row of scores), so
        // c_attn.bias agrees to 1e-4; every other tensor, and the loss, to 1e-5.
        for (const auto& [name, values] : straight.tensors) {
            const double d = relative_difference(moved.tensors.at(name), values);
            INFO(name << ": " << d);
            CHECK(d <= (name.ends_with("attn.c_attn.bias") ? 1e-4 : 1e-5));
        }
    }
}

TEST_CASE("a typed sharding policy runs its own ZeRO stage and refuses others", "[train][shard]") {
    const weft::nn::mlp_config mlp{.input_dim = 4, .hidden_dim = 4, .num_blocks = 1, .num_classes = 2, .seed = 1};
    const weft::train::engine_options o{.batch_size = 2};
    auto check = [&]<class Sharding>(Sharding, int stage) {
        INFO(Sharding::name);
        CHECK_NOTHROW(local::run(1, [&](local& world) {
            typed_engine<Sharding> engine(world, weft::parallel_config({.zero_stage = stage}), mlp, o);
        }));
        std::string refused;
        try {
            local::run(1, [&](local& world) {
                typed_engine<Sharding> engine(world, weft::parallel_config({.zero_stage = (stage + 1) % 4}), mlp, o);
            });
        } catch (const weft::error& e) {
            refused = e.what();
        }
        CHECK_THAT(refused, Catch::Matchers::Contains("zero_stage") &&
                                Catch::Matchers::Contains(std::string(Sharding::name)));
    };
    check(weft::shard::replicate{}, 0);
    check(weft::shard::zero<1>{}, 1);
    check(weft::shard::zero<2>{}, 2);
    check(weft::shard::zero<3>{}, 3);
}

namespace {

struct recompute_outcome {
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> tensors;
    std::size_t peak_activations = 0;  // the most of any rank
};

recompute_outcome train_recompute(const layout& l, std::vector<weft::train::recompute_mode> modes) {
    recompute_outcome out;
    std::mutex mutex;
    auto opts = options();
    opts.recompute = std::move(modes);
    local::run(l.world(), [&](local& world) {
        gpt_engine engine(world, l.config(0), model(), opts);
        std::vector<double> losses;
        for (int step = 0; step < 3; ++step) losses.push_back(engine.step(batch(step)).loss);
        const auto full = weft::train::gather_full_stages(engine);
        const std::size_t peak = engine.memory().peak_activations;
        std::lock_guard lock(mutex);
        if (world.rank() == 0) out.losses = losses;
        out.peak_activations = std::max(out.peak_activations, peak);
        keep_weights(engine, full, out.tensors);
    });
    return out;
}

}  // namespace

// Recompute trades compute for memory and nothing else: with every schedule here (the split
// I/W backward of zb-h1, zbv and dualpipev, dualpipev's overlapped F and B, and two chunks per
// rank included) full and selective recompute train the same bits as none and hold no more
// activations; with full backwards and several stages, full holds the fewest and selective
// fewer than none.
TEST_CASE("activation recompute trains the same bits and holds fewer activations", "[train][recompute]") {
    using enum weft::train::recompute_mode;
    const layout l = GENERATE(layout{2, 1, weft::sched::one_f_one_b::kind}, layout{2, 1, weft::sched::gpipe::kind},
                              layout{2, 1, weft::sched::zb_h1::kind}, layout{2, 1, weft::sched::interleaved::kind},
                              layout{2, 1, weft::sched::zbv::kind}, layout{2, 1, weft::sched::dualpipev::kind},
                              layout{1, 2, weft::sched::one_f_one_b::kind});
    // The schedules whose backward is split into I and W (dualpipev also overlaps an F with a B).
    const bool split_backward = l.schedule == weft::sched::zb_h1::kind || l.schedule == weft::sched::zbv::kind ||
                                l.schedule == weft::sched::dualpipev::kind;
    INFO("pp " << l.pp << " dp " << l.dp << " " << weft::to_string(l.schedule));
    const recompute_outcome kept = train_recompute(l, {});
    const recompute_outcome recomputed = train_recompute(l, {weft::train::recompute_mode::full});
    const recompute_outcome partly = train_recompute(l, {weft::train::recompute_mode::selective});
    for (const auto* other : {&recomputed, &partly}) {
        CHECK(other->losses == kept.losses);
        REQUIRE(other->tensors.size() == kept.tensors.size());
        for (const auto& [name, values] : kept.tensors) {
            INFO(name);
            CHECK(other->tensors.at(name) == values);
        }
    }
    INFO("peak activations: none " << kept.peak_activations << ", selective " << partly.peak_activations
                                    << ", full " << recomputed.peak_activations);
    CHECK(recomputed.peak_activations <= kept.peak_activations);
    CHECK(partly.peak_activations <= kept.peak_activations);
    // With a full backward B a stage holds whole activations only while it differentiates one
    // micro-batch. A split one keeps each micro-batch's I-to-W state (the layers' inputs and
    // the output gradients W needs, more than the forward kept), which recomputing the
    // forward does not shrink: with a split backward that state can set the peak whatever the
    // mode. With one stage (pp 1) a micro-batch's backward follows its forward, so one
    // micro-batch is in flight and full recompute rebuilds the very stash none keeps: the same
    // peak.
    if (!split_backward) {
        if (l.pp > 1)
            CHECK(recomputed.peak_activations < partly.peak_activations);
        else
            CHECK(recomputed.peak_activations == kept.peak_activations);
        CHECK(partly.peak_activations < kept.peak_activations);
    }
    // Per stage: full on the stages of the first chunk only, the same bits again.
    const int stages = l.pp * l.schedule.default_chunks();
    std::vector<weft::train::recompute_mode> per_stage(static_cast<std::size_t>(stages), none);
    for (int s = 0; s < l.pp; ++s) per_stage[static_cast<std::size_t>(s)] = full;
    if (stages > 1) {
        const recompute_outcome mixed = train_recompute(l, per_stage);
        CHECK(mixed.losses == kept.losses);
        CHECK(mixed.peak_activations <= kept.peak_activations);
    }
}

TEST_CASE("a recompute list of the wrong length is refused before the first step", "[train][recompute]") {
    using enum weft::train::recompute_mode;
    std::string message;
    local::run(2, [&](local& world) {
        try {
            auto opts = options();
            opts.recompute = {full, none, full};
            gpt_engine engine(world, layout{2, 1, weft::sched::one_f_one_b::kind}.config(0), model(), opts);
        } catch (const weft::error& e) {
            if (world.rank() == 0) message = e.what();
        }
    });
    CHECK_THAT(message, Catch::Matchers::Contains("recompute = \"full,none,full\"") &&
                            Catch::Matchers::Contains("one per stage (2 stages in this layout)"));
    CHECK_THROWS_WITH(weft::train::parse_recompute("full,sometimes", "--recompute"),
                      Catch::Matchers::Contains("--recompute = \"sometimes\"") &&
                          Catch::Matchers::Contains("none, full or selective"));
    CHECK(weft::train::parse_recompute("selective", "--recompute") ==
          std::vector<weft::train::recompute_mode>{selective});
}
