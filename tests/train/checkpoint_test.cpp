// train::save and train::load on a running engine: a 2-stage pipeline on threads saves
// (rank 0 receives rank 1's stage), and one process loads every tensor and AdamW moment
// exactly as the pipeline held them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "scratch_dir.hpp"
#include "training_run.hpp"
#include "weft/train/checkpoint.hpp"

namespace {

using engine_t =
    weft::train::engine<weft_test::all_schedules, weft::shard::replicate, weft::comm::local, weft::exec::cpu>;

struct held_state {
    std::map<std::string, std::vector<float>> parameters, exp_avg, exp_avg_sq;
    std::uint64_t steps = 0;
};

// Every tensor, and its AdamW moments, of the stages `engine` runs on this rank.
void collect(engine_t& engine, held_state& into, std::mutex& lock) {
    const std::lock_guard guard(lock);
    for (const int s : engine.parts().local_stages()) {
        const auto& stage = engine.parts().stage(s);
        const auto& optimizer = engine.parts().stage_optimizer(s);
        into.steps = optimizer.step_count();
        const auto state = optimizer.state_views();
        REQUIRE(state.size() == 2);
        REQUIRE(state[0].name == "exp_avg");
        REQUIRE(state[1].name == "exp_avg_sq");
        for (const auto& info : stage.registry().entries()) {
            const auto part = [&](auto values) {
                return std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                          values.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
            };
            into.parameters[info.name] = part(stage.parameters());
            into.exp_avg[info.name] = part(state[0].values);
            into.exp_avg_sq[info.name] = part(state[1].values);
        }
    }
}

}  // namespace

TEST_CASE("a checkpoint saved by a pipeline loads into one process, moments included", "[train][io]") {
    const weft_test::scratch_dir dir("engine_checkpoint");
    const auto path = dir.path / "model.safetensors";
    const weft::data::synthetic_dataset data(weft_test::test_model().input_dim, weft_test::test_model().num_classes, 7);

    std::mutex lock;
    held_state saved;
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        engine_t engine(world, weft::parallel_config({.pp = 2, .microbatches = 4, .world_size = 2}),
                        weft_test::test_model(), weft_test::test_options());
        for (int step = 0; step < 2; ++step) static_cast<void>(engine.step(data.batch(step, weft_test::batch_size)));
        weft::train::save(engine, path);
        collect(engine, saved, lock);
    });

    held_state loaded;
    weft::comm::local::run(1, [&](weft::comm::local& world) {
        engine_t engine(world, weft::parallel_config({.microbatches = 4}), weft_test::test_model(),
                        weft_test::test_options());
        weft::train::load(engine, path);
        collect(engine, loaded, lock);
    });

    CHECK(loaded.steps == 2);
    REQUIRE(loaded.parameters.size() == saved.parameters.size());
    for (const auto& [name, values] : saved.parameters) {
        INFO("tensor " << name);
        CHECK(loaded.parameters.at(name) == values);
        CHECK(loaded.exp_avg.at(name) == saved.exp_avg.at(name));
        CHECK(loaded.exp_avg_sq.at(name) == saved.exp_avg_sq.at(name));
    }
}
