// The training state as a value: an engine starts from the model's initial tensors, holds
// them and its optimizers' state in one shard::training_state, hands it over
// (release_state) and a new engine continues from it bit for bit; checkpoints carry it,
// progress included, so a run saved and resumed continues exactly as if it had not
// stopped (same data, same step numbers), under every ZeRO stage and with SGD's momentum.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "scratch_dir.hpp"
#include "training_run.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/shard/training_state.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/checkpoint_directory.hpp"

namespace {

using weft::comm::local;
using weft::parallel_config;
using weft_test::batch_size;
using weft_test::test_model;
using engine_t = weft::train::engine<weft_test::all_schedules, weft::shard::any_zero, local, weft::exec::cpu>;

weft::train::engine_options options(weft::optim::optimizer_kind kind) {
    auto o = weft_test::test_options();
    o.optimizer.kind = kind;
    o.optimizer.momentum = kind == weft::optim::optimizer_kind::sgd ? 0.9 : 0.0;
    return o;
}

parallel_config layout(int pp, int dp, int zero) {
    return parallel_config({.pp = pp, .dp = dp, .zero_stage = zero, .microbatches = 4,
                            .schedule = weft::sched::zb_h1::kind, .world_size = pp * dp});
}

const weft::data::synthetic_dataset& data() {
    static const weft::data::synthetic_dataset d(test_model().input_dim, test_model().num_classes, 7);
    return d;
}

struct trace {
    std::vector<long long> steps;  // the step numbers the log printed
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> parameters;  // every tensor this replica's ranks hold
    std::map<std::string, std::vector<float>> optimizer;   // "<tensor>.<state>" of the same, full
    weft::shard::training_progress progress;
};

// Trains `steps` steps, taking each batch at the engine's data position.
template <class Engine>
void train(Engine& engine, int steps, trace& into) {
    for (int i = 0; i < steps; ++i) {
        const auto batch = data().batch(static_cast<long long>(engine.progress().samples / batch_size), batch_size);
        const auto stats = engine.step(batch);
        into.steps.push_back(stats.step);
        into.losses.push_back(stats.loss);
    }
}

// Merges into `into` what `engine` holds, gathered whole (ZeRO ranges and all), from the
// ranks of data-parallel replica 0, and rank 0's steps, losses and progress from `local_trace`.
template <class Engine>
void collect(Engine& engine, const trace& local_trace, trace& into, std::mutex& lock) {
    const auto full = weft::train::gather_full_stages(engine);
    const std::lock_guard guard(lock);
    if (engine.parts().coordinates().dp_index == 0 && engine.parts().pipeline_rank() == 0) {
        into.steps = local_trace.steps;
        into.losses = local_trace.losses;
        into.progress = engine.progress();
    }
    if (engine.parts().coordinates().dp_index != 0) return;
    for (const auto& f : full)
        for (const auto& info : f.registry.entries()) {
            auto part = [&](std::span<const float> v) {
                if (v.empty()) return std::vector<float>{};
                return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                          v.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
            };
            into.parameters[info.name] = part(f.parameters);
            for (const auto& t : f.optimizer.tensors) into.optimizer[info.name + "." + t.name] = part(t.values);
        }
}

void require_same(const trace& a, const trace& b) {
    CHECK(a.progress == b.progress);
    REQUIRE(a.parameters.size() == b.parameters.size());
    for (const auto& [name, values] : a.parameters) {
        INFO(name);
        CHECK(b.parameters.at(name) == values);
    }
    REQUIRE(a.optimizer.size() == b.optimizer.size());
    for (const auto& [name, values] : a.optimizer) {
        INFO(name);
        CHECK(b.optimizer.at(name) == values);
    }
}

}  // namespace

TEST_CASE("a fresh training state is the model's initial tensors and fresh optimizers", "[train][state]") {
    const weft::shard::stage_placement stages[] = {{0, {0, 3}}, {2, {5, 8}}};
    const auto state = weft::shard::initial_training_state<weft::models::mlp, weft::exec::cpu>(
        test_model(), stages, 0, 1, weft_test::test_options().optimizer, 42);
    REQUIRE(state.stages.size() == 2);
    CHECK(state.stage_indices() == std::vector<int>{0, 2});
    CHECK(state.progress == weft::shard::training_progress{0, 0, 42});
    for (const auto& [index, units] : stages) {
        const auto& s = state.stage(index);
        const auto expected = weft::nn::mlp_stage<weft::exec::cpu>::initial_tensors(test_model(), units);
        CHECK(s.units == units);
        CHECK(s.tensors.zero_stage == 0);
        CHECK(s.tensors.registry() == expected.registry());
        CHECK(std::vector<float>(s.tensors.full.parameters().begin(), s.tensors.full.parameters().end()) ==
              std::vector<float>(expected.parameters().begin(), expected.parameters().end()));
        CHECK(s.optimizer.step_count() == 0);
        CHECK(s.optimizer.kind() == weft::optim::optimizer_kind::adamw);
    }
    CHECK_FALSE(state.holds(1));
    CHECK_THROWS_WITH(state.stage(1), Catch::Contains("stage = 1") && Catch::Contains("stages 0, 2"));
}

TEST_CASE("an engine rebuilt around another's training state continues bit for bit", "[train][state]") {
    const int zero = GENERATE(0, 1, 2, 3);
    const auto kind = GENERATE(weft::optim::optimizer_kind::adamw, weft::optim::optimizer_kind::sgd);
    INFO("zero " << zero << ", " << weft::optim::to_string(kind));
    std::mutex lock;
    trace straight, rebuilt;
    std::string released_message;
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(2, 2, zero), test_model(), options(kind));
        trace t;
        train(engine, 4, t);
        collect(engine, t, straight, lock);
    });
    local::run(4, [&](local& world) {
        std::optional<engine_t> engine;
        engine.emplace(world, layout(2, 2, zero), test_model(), options(kind));
        trace t;
        train(*engine, 2, t);
        auto state = std::move(*engine).release_state();
        if (world.rank() == 0) {
            const weft::data::synthetic_dataset& d = data();
            try {
                static_cast<void>(engine->step(d.batch(0, batch_size)));
            } catch (const weft::error& e) {
                const std::lock_guard guard(lock);
                released_message = e.what();
            }
        }
        engine.reset();
        // The same layout, a new engine: it adopts the state, ZeRO ranges and all.
        engine.emplace(world, layout(2, 2, zero), test_model(), options(kind), std::move(state));
        train(*engine, 2, t);
        collect(*engine, t, rebuilt, lock);
    });
    CHECK(rebuilt.steps == std::vector<long long>{0, 1, 2, 3});
    // An engine whose state was handed over refuses to step rather than train on nothing.
    CHECK_THAT(released_message, Catch::Matchers::Contains("release_state() handed the state over"));
    CHECK(rebuilt.losses == straight.losses);
    CHECK(straight.progress.samples == 4 * batch_size);
    require_same(straight, rebuilt);
}

TEST_CASE("a run saved and resumed continues as if it had not stopped", "[train][state][checkpoint]") {
    const int zero = GENERATE(0, 1, 3);
    const auto kind = GENERATE(weft::optim::optimizer_kind::adamw, weft::optim::optimizer_kind::sgd);
    const int stop = GENERATE(1, 3);
    INFO("zero " << zero << ", " << weft::optim::to_string(kind) << ", saved after step " << stop);
    const weft_test::scratch_dir dir("resume");
    const auto path = dir.path / "model.safetensors";
    std::mutex lock;
    trace straight, resumed;
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(2, 2, zero), test_model(), options(kind));
        trace t;
        train(engine, 5, t);
        collect(engine, t, straight, lock);
    });
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(2, 2, zero), test_model(), options(kind));
        trace t;
        train(engine, stop, t);
        weft::train::save(engine, path);
    });
    local::run(4, [&](local& world) {
        // A new process: the model's initial weights until the checkpoint replaces them.
        engine_t engine(world, layout(2, 2, zero), test_model(), options(kind));
        weft::train::load(engine, path);
        trace t;
        train(engine, 5 - stop, t);
        collect(engine, t, resumed, lock);
    });
    REQUIRE(resumed.losses.size() == std::size_t(5 - stop));
    for (std::size_t i = 0; i < resumed.losses.size(); ++i) {
        INFO("step " << stop + int(i));
        CHECK(resumed.steps[i] == stop + static_cast<long long>(i));
        CHECK(resumed.losses[i] == straight.losses[std::size_t(stop) + i]);
    }
    require_same(straight, resumed);
}

TEST_CASE("checkpoint directories resume bit for bit, and in another layout within rounding",
          "[train][state][checkpoint]") {
    const int zero = GENERATE(0, 3);
    INFO("zero " << zero);
    const weft_test::scratch_dir dir("resume_directory");
    const auto root = dir.path / "ckpt";
    std::filesystem::create_directory(root);
    std::mutex lock;
    trace straight, resumed, other_layout;
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(2, 2, zero), test_model(), options(weft::optim::optimizer_kind::adamw));
        trace t;
        train(engine, 5, t);
        collect(engine, t, straight, lock);
    });
    std::vector<std::filesystem::path> saved_paths;
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(2, 2, zero), test_model(), options(weft::optim::optimizer_kind::adamw));
        for (int step = 0; step < 3; ++step) {
            trace t;
            train(engine, 1, t);
            const auto saved = weft::train::save_checkpoint_directory(engine, root, {{"note", "test"}}, 1);
            const std::lock_guard guard(lock);
            if (world.rank() == 0) saved_paths.push_back(saved.directory);
        }
    });
    REQUIRE(saved_paths.size() == 3);
    CHECK(saved_paths.back() == root / "step-00000003");
    // --keep 1: only the newest is left, and `latest` names it.
    CHECK_FALSE(std::filesystem::exists(root / "step-00000001"));
    CHECK_FALSE(std::filesystem::exists(root / "step-00000002"));
    CHECK(weft::io::resolve_checkpoint(root, "resume") == root / "step-00000003");
    const auto manifest = weft::io::read_manifest(root / "step-00000003");
    CHECK(manifest.step == 3);
    CHECK(manifest.samples == 3 * batch_size);
    CHECK(manifest.layout == weft::io::checkpoint_layout{.pp = 2, .dp = 2, .tp = 1, .zero = zero, .chunks = 1,
                                                         .microbatches = 4, .world = 4, .schedule = "zb-h1"});
    CHECK(manifest.run == nlohmann::json{{"note", "test"}});
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(2, 2, zero), test_model(), options(weft::optim::optimizer_kind::adamw));
        weft::train::load_checkpoint_directory(engine, root);
        trace t;
        train(engine, 2, t);
        collect(engine, t, resumed, lock);
    });
    CHECK(resumed.steps == std::vector<long long>{3, 4});
    CHECK(resumed.losses == std::vector<double>(straight.losses.begin() + 3, straight.losses.end()));
    require_same(straight, resumed);
    // Another layout: four data-parallel replicas under ZeRO-2 sum the gradients in another order.
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(1, 4, 2), test_model(), options(weft::optim::optimizer_kind::adamw));
        weft::train::load_checkpoint_directory(engine, root);
        trace t;
        train(engine, 2, t);
        collect(engine, t, other_layout, lock);
    });
    REQUIRE(other_layout.losses.size() == 2);
    for (std::size_t i = 0; i < 2; ++i)
        CHECK(other_layout.losses[i] == Approx(straight.losses[3 + i]).epsilon(1e-5));
    for (const auto& [name, values] : straight.parameters) {
        const auto& other = other_layout.parameters.at(name);
        REQUIRE(other.size() == values.size());
        for (std::size_t i = 0; i < values.size(); ++i) CHECK(other[i] == Approx(values[i]).epsilon(1e-4).margin(1e-6));
    }
}

TEST_CASE("evaluate() is the loss a step would report, and changes nothing", "[train][state][evaluate]") {
    const auto schedule =
        GENERATE(weft::sched::zb_h1::kind, weft::sched::interleaved::kind, weft::sched::dualpipev::kind);
    const int zero = GENERATE(0, 3);
    INFO(weft::to_string(schedule) << ", zero " << zero);
    const parallel_config config({.pp = 2, .dp = 2, .zero_stage = zero, .microbatches = 4,
                                  .chunks = schedule.default_chunks(), .schedule = schedule, .world_size = 4});
    std::mutex lock;
    std::vector<double> evaluated, stepped, after;
    trace evaluated_run, plain_run;
    local::run(4, [&](local& world) {
        engine_t engine(world, config, test_model(), options(weft::optim::optimizer_kind::adamw));
        const auto batch = data().batch(0, batch_size);
        const double first = engine.evaluate(batch);
        const double again = engine.evaluate(batch);
        trace t;
        train(engine, 2, t);
        const double later = engine.evaluate(data().batch(9, batch_size));
        collect(engine, t, evaluated_run, lock);
        const std::lock_guard guard(lock);
        evaluated.push_back(first);
        evaluated.push_back(again);
        after.push_back(later);
    });
    local::run(4, [&](local& world) {
        engine_t engine(world, config, test_model(), options(weft::optim::optimizer_kind::adamw));
        trace t;
        train(engine, 2, t);
        collect(engine, t, plain_run, lock);
        const auto stats = engine.step(data().batch(9, batch_size));
        const std::lock_guard guard(lock);
        stepped.push_back(stats.loss);
    });
    REQUIRE(evaluated.size() == 8);
    // The forward of step 0 on the same weights: bit for bit, on every rank, every time.
    for (const double e : evaluated) CHECK(e == plain_run.losses[0]);
    for (const double a : after) CHECK(a == stepped.front());
    // Evaluating changed neither the training nor its progress.
    CHECK(evaluated_run.losses == plain_run.losses);
    CHECK(evaluated_run.parameters == plain_run.parameters);
    CHECK(evaluated_run.progress.step == 2);
}

TEST_CASE("a damaged checkpoint directory is refused before anything is loaded", "[train][state][checkpoint]") {
    const weft_test::scratch_dir dir("damaged_directory");
    const auto root = dir.path / "ckpt";
    std::filesystem::create_directory(root);
    local::run(2, [&](local& world) {
        engine_t engine(world, layout(2, 1, 1), test_model(), options(weft::optim::optimizer_kind::adamw));
        trace t;
        train(engine, 2, t);
        (void)weft::train::save_checkpoint_directory(engine, root);
    });
    const auto checkpoint = root / "step-00000002";
    std::filesystem::resize_file(checkpoint / "optimizer.safetensors",
                                 std::filesystem::file_size(checkpoint / "optimizer.safetensors") - 4);
    std::mutex lock;
    std::vector<std::string> messages;
    std::vector<std::uint64_t> steps_after;
    std::vector<bool> untouched;
    local::run(2, [&](local& world) {
        engine_t engine(world, layout(2, 1, 1), test_model(), options(weft::optim::optimizer_kind::adamw));
        engine_t fresh(world, layout(2, 1, 1), test_model(), options(weft::optim::optimizer_kind::adamw));
        std::string message = "no error";
        try {
            weft::train::load_checkpoint_directory(engine, root, "--resume");
        } catch (const weft::error& e) {
            message = e.what();
        }
        const auto mine = weft::train::gather_full_stages(engine);
        const auto initial = weft::train::gather_full_stages(fresh);
        bool same = mine.size() == initial.size();
        for (std::size_t s = 0; same && s < mine.size(); ++s) same = mine[s].parameters == initial[s].parameters;
        const std::lock_guard guard(lock);
        messages.push_back(message);
        steps_after.push_back(engine.progress().step);
        untouched.push_back(same);
    });
    REQUIRE(messages.size() == 2);
    for (std::size_t r = 0; r < 2; ++r) {
        CHECK_THAT(messages[r], Catch::Matchers::Contains("optimizer.safetensors") &&
                                    Catch::Matchers::Contains("bytes but the manifest records"));
        CHECK(steps_after[r] == 0);
        CHECK(untouched[r]);
    }
}

TEST_CASE("step counts past 2^24 cross ranks exactly when a pipeline saves", "[train][state][checkpoint]") {
    // The optimizer's step count goes from each pipeline rank to the writer; as a float it
    // would round 2^24 + 1 to 2^24, and the stages' counts would disagree.
    const weft_test::scratch_dir dir("big_step");
    const auto first = dir.path / "first.safetensors";
    const auto second = dir.path / "second.safetensors";
    local::run(2, [&](local& world) {
        engine_t engine(world, layout(2, 1, 0), test_model(), options(weft::optim::optimizer_kind::adamw));
        trace t;
        train(engine, 1, t);
        weft::train::save(engine, first);
    });
    // The companion as a run of 2^24 + 1 steps would have written it.
    const std::uint64_t big = (std::uint64_t{1} << 24) + 1;
    {
        const auto companion = weft::io::read_safetensors(weft::train::optimizer_companion(first));
        auto metadata = companion.metadata();
        metadata[std::string(weft::io::optimizer_step_key)] = std::to_string(big);
        weft::io::write_safetensors(weft::train::optimizer_companion(first), companion.tensors(), metadata);
    }
    std::mutex lock;
    std::vector<std::uint64_t> counts;
    local::run(2, [&](local& world) {
        engine_t engine(world, layout(2, 1, 0), test_model(), options(weft::optim::optimizer_kind::adamw));
        weft::train::load(engine, first);
        weft::train::save(engine, second);
        const std::lock_guard guard(lock);
        counts.push_back(engine.parts().stage_optimizer(engine.parts().local_stages().front()).step_count());
    });
    CHECK(counts == std::vector<std::uint64_t>{big, big});
    const auto saved = weft::io::read_safetensors(weft::train::optimizer_companion(second));
    CHECK(saved.metadata().at(std::string(weft::io::optimizer_step_key)) == std::to_string(big));
}

TEST_CASE("a training state of another layout or optimizer is refused before anything runs", "[train][state]") {
    auto message = [](auto&& make) -> std::string {
        try {
            make();
        } catch (const weft::error& e) {
            return e.what();
        }
        return "no error";
    };
    // A 2-stage pipeline's states do not fit a 1-stage layout: rank 1 holds another stage,
    // rank 0 the same stage index over fewer units.
    std::vector<std::optional<weft::shard::training_state<float>>> pipeline(2);
    local::run(2, [&](local& world) {
        engine_t engine(world, layout(2, 1, 0), test_model(), options(weft::optim::optimizer_kind::adamw));
        pipeline[std::size_t(world.rank())] = std::move(engine).release_state();
    });
    REQUIRE(pipeline[0]);
    REQUIRE(pipeline[1]);
    const auto adopt = [&](const weft::shard::training_state<float>& state) {
        return message([&] {
            local::run(1, [&](local& world) {
                engine_t engine(world, layout(1, 1, 0), test_model(), options(weft::optim::optimizer_kind::adamw),
                                state);
            });
        });
    };
    CHECK_THAT(adopt(*pipeline[1]), Catch::Matchers::Contains("training state stages = \"[1]\"") &&
                                        Catch::Matchers::Contains("must be this rank's stages [0]"));
    CHECK_THAT(adopt(*pipeline[0]), Catch::Matchers::Contains("units of stage 0 = \"[0, 4)\"") &&
                                        Catch::Matchers::Contains("must be [0, 8)"));
    // ZeRO-3 tensors into a ZeRO-1 engine, and AdamW state into an SGD engine.
    std::optional<weft::shard::training_state<float>> zero3;
    local::run(2, [&](local& world) {
        engine_t engine(world, layout(1, 2, 3), test_model(), options(weft::optim::optimizer_kind::adamw));
        auto state = std::move(engine).release_state();
        if (world.rank() == 0) zero3 = std::move(state);
    });
    REQUIRE(zero3);
    const std::string wrong_optimizer = message([&] {
        local::run(1, [&](local& world) {
            engine_t engine(world, layout(1, 1, 0), test_model(), options(weft::optim::optimizer_kind::sgd), *zero3);
        });
    });
    CHECK_THAT(wrong_optimizer, Catch::Matchers::Contains("optimizer of stage 0") &&
                                    Catch::Matchers::Contains("must be sgd"));
    const std::string wrong_form = message([&] {
        local::run(1, [&](local& world) {
            engine_t engine(world, layout(1, 1, 1), test_model(), options(weft::optim::optimizer_kind::adamw), *zero3);
        });
    });
    CHECK_THAT(wrong_form, Catch::Matchers::Contains("ZeRO stage = 3"));
}

TEST_CASE("a step whose loss or gradients are not finite is not applied, and training goes on",
          "[train][state][finite]") {
    const int zero = GENERATE(0, 1, 2, 3);
    INFO("zero " << zero);
    std::mutex lock;
    trace before, after;
    weft::train::step_stats poisoned{}, next{};
    local::run(4, [&](local& world) {
        engine_t engine(world, layout(2, 2, zero), test_model(), options(weft::optim::optimizer_kind::adamw));
        trace t;
        train(engine, 1, t);
        collect(engine, t, before, lock);
        // One NaN input: every loss and gradient downstream of it turns NaN.
        auto batch = data().batch(1, batch_size);
        batch.inputs[3] = std::nanf("");
        const auto stats = engine.step(batch);
        trace u = t;
        collect(engine, u, after, lock);
        const auto then = engine.step(data().batch(2, batch_size));
        if (world.rank() == 0) {
            poisoned = stats;
            next = then;
        }
    });
    CHECK_FALSE(poisoned.applied());
    CHECK(poisoned.nonfinite_stage == 1);  // backward starts at the last stage, 1 of 2
    CHECK(std::isnan(poisoned.loss));
    // The weights and the AdamW moments (and its step count) are as they were.
    CHECK(after.progress.step == 2);  // the batch was used: the data moves on
    after.progress = before.progress;
    require_same(before, after);
    CHECK(next.applied());
    CHECK(std::isfinite(next.loss));
    CHECK(next.step == 2);
}
