// SWARM checkpoints (swarm/checkpoint.hpp): every stage's state image saved as a weft
// checkpoint directory and read back bit for bit into fresh stages; the refusals of a
// checkpoint of another model or optimizer, and of a torn one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/checkpoint_manifest.hpp"
#include "weft/swarm/checkpoint.hpp"

namespace {

const weft::nn::gpt_config saved_model{
    .num_layers = 2, .d_model = 16, .num_heads = 2, .vocab_size = 32, .seq_len = 4, .seed = 5};
const weft::optim::optimizer_options saved_adamw{
    .kind = weft::optim::optimizer_kind::adamw, .lr = 1e-2, .weight_decay = 0.1};

// Stages that took `steps` optimizer steps with made-up gradients (the same on the tied wte).
std::vector<std::unique_ptr<weft::swarm::stage_service>> trained_stages(const std::vector<weft::nn::unit_range>& units,
                                                                        int steps) {
    std::vector<std::unique_ptr<weft::swarm::stage_service>> stages;
    for (std::size_t k = 0; k < units.size(); ++k)
        stages.push_back(std::make_unique<weft::swarm::stage_service>(saved_model, int(k), int(units.size()), units[k],
                                                                      saved_adamw));
    for (int s = 0; s < steps; ++s)
        for (auto& stage : stages) {
            std::vector<float> gradient(stage->parameters().size());
            for (const auto& info : stage->registry().entries())
                for (std::size_t i = 0; i < info.size; ++i)
                    gradient[info.offset + i] = 1e-3f * float((i * 7 + std::size_t(s)) % 13) - 6e-3f;
            stage->apply(std::uint64_t(s), 1e-2, 1, gradient);
        }
    return stages;
}

std::vector<weft::swarm::stage_image> images_of(
    const std::vector<std::unique_ptr<weft::swarm::stage_service>>& stages) {
    std::vector<weft::swarm::stage_image> images;
    for (const auto& stage : stages) {
        const auto m = stage->manifest();
        images.push_back({m, stage->read_state(0, m.total())});
    }
    return images;
}

struct temporary_root {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("weft_swarm_ckpt_" + std::to_string(::getpid()));
    temporary_root() { std::filesystem::remove_all(path); }
    ~temporary_root() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("a SWARM checkpoint restores every stage's parameters and optimizer state bit for bit",
          "[swarm][checkpoint]") {
    const auto units = weft::swarm::swarm_stage_units(saved_model, 3, {});
    const auto stages = trained_stages(units, 3);
    const auto images = images_of(stages);
    temporary_root root;
    std::filesystem::create_directories(root.path);
    const weft::swarm::swarm_checkpoint_run run{.model = saved_model,
                                                .units = units,
                                                .optimizer = saved_adamw,
                                                .microbatches = 2,
                                                .workers = 6,
                                                .run = {{"program", "swarm_train"}}};
    const auto saved = weft::swarm::save_swarm_checkpoint(root.path, images, run, /*samples=*/24);
    CHECK(saved.directory == root.path / "step-00000003");
    const auto manifest = weft::io::read_manifest(saved.directory);
    CHECK(manifest.step == 3);
    CHECK(manifest.samples == 24);
    CHECK(manifest.layout.pp == 3);
    CHECK(manifest.layout.schedule == "swarm");
    // From the root (its `latest`), into fresh stages: the same images.
    const auto restored = weft::swarm::load_swarm_checkpoint(root.path, saved_model, units, saved_adamw);
    REQUIRE(restored.stages.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
        const auto m = restored.stages[k]->manifest();
        CHECK(m == images[k].manifest);
        CHECK(restored.stages[k]->read_state(0, m.total()) == images[k].values);
        CHECK(restored.stages[k]->step() == 3);
    }
}

TEST_CASE("a SWARM checkpoint of another model, optimizer, or one torn, is refused", "[swarm][checkpoint]") {
    const auto units = weft::swarm::swarm_stage_units(saved_model, 2, {});
    const auto images = images_of(trained_stages(units, 1));
    temporary_root root;
    std::filesystem::create_directories(root.path);
    const weft::swarm::swarm_checkpoint_run run{
        .model = saved_model, .units = units, .optimizer = saved_adamw, .microbatches = 2, .workers = 4, .run = {}};
    const auto saved = weft::swarm::save_swarm_checkpoint(root.path, images, run, 8);
    auto other = saved_model;
    other.num_heads = 4;
    CHECK_THROWS_WITH(weft::swarm::load_swarm_checkpoint(root.path, other, units, saved_adamw),
                      Catch::Contains("\"model\" of manifest"));
    auto sgd = saved_adamw;
    sgd.kind = weft::optim::optimizer_kind::sgd;
    CHECK_THROWS_WITH(weft::swarm::load_swarm_checkpoint(root.path, saved_model, units, sgd),
                      Catch::Contains("--optimizer adamw"));
    std::filesystem::remove(saved.directory / "manifest.json");
    CHECK_THROWS_AS(weft::swarm::load_swarm_checkpoint(saved.directory, saved_model, units, saved_adamw), weft::error);
    // Images of two steps do not make a checkpoint.
    auto mixed = images;
    mixed[1].manifest.step += 1;
    CHECK_THROWS_WITH(weft::swarm::save_swarm_checkpoint(root.path, mixed, run, 8),
                      Catch::Contains("a checkpoint is of one step"));
}
