// Checkpoint directories of a running engine (docs/checkpoints.md). One checkpoint is one
// directory: model.safetensors (the weights, Hugging Face safetensors), optimizer.safetensors
// (the optimizer's state tensors) and manifest.json, written last, with the model, the
// progress, the layout, the run's settings and the SHA-256 of each file. It is staged under a
// temporary name and renamed into place when whole; then the root's `latest` names it.
// Loading checks the manifest and every file first, and refuses a torn, foreign or
// mismatched checkpoint, naming the file, before it changes anything.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "weft/core/error.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/io/checkpoint_manifest.hpp"
#include "weft/io/checkpoint_root.hpp"
#include "weft/train/checkpoint.hpp"

namespace weft::train {

inline constexpr std::string_view weights_file_name = "model.safetensors";
inline constexpr std::string_view optimizer_file_name = "optimizer.safetensors";

template <class Engine>
[[nodiscard]] io::checkpoint_layout layout_of(const Engine& engine) {
    const auto& c = engine.config();
    return {.pp = c.pp(),
            .dp = c.dp(),
            .tp = c.tp(),
            .zero = c.zero_stage(),
            .chunks = c.chunks(),
            .microbatches = c.microbatches(),
            .world = c.world_size(),
            .schedule = std::string(c.schedule().name())};
}

template <class Engine>
[[nodiscard]] std::string model_description(const Engine& engine) {
    if constexpr (describable_model<typename Engine::model_type>)
        return Engine::model_type::describe(engine.model());
    else
        return {};
}

struct checkpoint_saved {
    std::filesystem::path directory;            // root/step-<n>
    std::vector<std::filesystem::path> pruned;  // older checkpoints removed by `keep`
};

// Collective over the world. Saves the engine's state as `root/step-<n>` (n: the steps taken),
// points `root/latest` at it, and then keeps only the newest `keep` checkpoints (0: all).
// `run` is kept in the manifest as the trainer's settings. Every rank returns the same paths;
// only the checkpoint writer touches the disk.
template <class Engine>
checkpoint_saved save_checkpoint_directory(Engine& engine, const std::filesystem::path& root,
                                           const nlohmann::json& run = nlohmann::json::object(), int keep = 0) {
    require(keep >= 0, "keep", keep, "must be >= 0 (0 keeps every checkpoint)");
    const shard::training_progress progress = engine.progress();
    const bool writer = is_checkpoint_writer(engine);
    io::staged_checkpoint staged(root, progress.step, "checkpoint directory", writer);
    checkpoint_saved saved{staged.target(), {}};
    save(engine, staged.path() / weights_file_name, staged.path() / optimizer_file_name);
    if (!writer) return saved;
    io::checkpoint_manifest manifest{
        .model = model_description(engine),
        .optimizer = std::string(engine.parts().stage_optimizer(engine.parts().local_stages().front()).name()),
        .step = progress.step,
        .samples = progress.samples,
        .rng_seed = progress.rng_seed,
        .layout = layout_of(engine),
        .run = run,
        .files = {}};
    for (const std::string_view file : {weights_file_name, optimizer_file_name})
        manifest.files.push_back(io::describe_checkpoint_file(staged.path(), std::string(file)));
    io::write_manifest(staged.path(), manifest);  // last: its presence says the rest is whole
    staged.commit();
    saved.pruned = staged.publish(keep);
    return saved;
}

// Not collective: every rank checks `path` (a checkpoint directory, or a root whose `latest`
// names one) and fills its own stages and the run's progress from it. Refuses, before it
// changes anything: a directory without manifest.json (torn), a foreign manifest, a file
// whose size or SHA-256 differs from the manifest (naming it), another model or optimizer.
// Returns the manifest read.
template <class Engine>
io::checkpoint_manifest load_checkpoint_directory(Engine& engine, const std::filesystem::path& path,
                                                  std::string_view parameter = "checkpoint") {
    const std::filesystem::path directory = io::resolve_checkpoint(path, parameter);
    io::checkpoint_manifest manifest = io::read_manifest(directory);
    const std::string where = "manifest " + (directory / io::manifest_file_name).string();
    const std::string ours = model_description(engine);
    require(manifest.model == ours, "\"model\" of " + where, manifest.model,
            "this run's model is \"" + ours + "\"; resume it with the model it was saved from");
    const std::string optimizer(engine.parts().stage_optimizer(engine.parts().local_stages().front()).name());
    require(manifest.optimizer == optimizer, "\"optimizer\" of " + where, manifest.optimizer,
            "this run uses " + optimizer + "; resume with --optimizer " + manifest.optimizer);
    io::verify_checkpoint_files(directory, manifest, {weights_file_name, optimizer_file_name});
    load(engine, directory / weights_file_name, directory / optimizer_file_name);
    // One message for the one field that differs, naming both values: an edited rng_seed or
    // sample count left the steps equal, and "step 8 must equal the manifest's step 8" said
    // nothing.
    const auto loaded = engine.progress();
    const auto same = [&](const char* field, std::uint64_t in_weights, std::uint64_t in_manifest) {
        require(in_weights == in_manifest, std::string("\"") + field + "\" of " + where, in_manifest,
                "the weights file " + (directory / weights_file_name).string() + " records " +
                    std::to_string(in_weights) +
                    ": the files come from different saves, or the manifest was edited; restore it or take "
                    "another checkpoint");
    };
    same("step", loaded.step, manifest.step);
    same("samples", loaded.samples, manifest.samples);
    same("rng_seed", loaded.rng_seed, manifest.rng_seed);
    return manifest;
}

}  // namespace weft::train
