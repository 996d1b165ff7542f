// A SWARM run's checkpoints: every stage's state image (its parameters and optimizer state,
// as its workers hold them, swarm/stage_service.hpp) written as one weft checkpoint
// directory (docs/checkpoints.md: model.safetensors, optimizer.safetensors, manifest.json
// last, staged under a temporary name and renamed into place, then `latest`), and read back
// into one stage_service per stage, from which the trainer serves the stages' state to the
// workers that restart the run. The files are those train_gpt writes and reads, so either
// program resumes the other's checkpoints of the same model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/error.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/io/checkpoint.hpp"
#include "weft/io/checkpoint_manifest.hpp"
#include "weft/io/checkpoint_root.hpp"
#include "weft/models/gpt.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/swarm/stage_service.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/checkpoint_directory.hpp"

namespace weft::swarm {

// One stage's state as fetched from a worker: its manifest and the image it describes.
struct stage_image {
    state_manifest manifest;
    std::vector<float> values;
};

// What a SWARM checkpoint records of its run besides the stages' state.
struct swarm_checkpoint_run {
    nn::gpt_config model;
    std::vector<nn::unit_range> units;  // per stage
    optim::optimizer_options optimizer;
    int microbatches = 1;
    int workers = 0;                                // members serving when it was saved
    nlohmann::json run = nlohmann::json::object();  // the program's settings, kept in the manifest
};

// Writes `images` (one per stage, all of one step) as root/step-<n> and points root/latest at
// it; keeps the newest `keep` checkpoints (0: all). `samples`: the data position.
inline train::checkpoint_saved save_swarm_checkpoint(const std::filesystem::path& root,
                                                     const std::vector<stage_image>& images,
                                                     const swarm_checkpoint_run& run, std::uint64_t samples,
                                                     int keep = 0) {
    require(keep >= 0, "--keep", keep, "must be >= 0 (0 keeps every checkpoint)");
    require(!images.empty() && images.size() == run.units.size(), "stage images", images.size(),
            "must hold one image per stage (" + std::to_string(run.units.size()) + ")");
    const std::uint64_t step = images.front().manifest.step;
    std::vector<weft::parameter_registry> registries;
    for (std::size_t k = 0; k < images.size(); ++k) {
        const auto& image = images[k];
        require(image.manifest.step == step, "step of stage " + std::to_string(k) + "'s image", image.manifest.step,
                "must equal stage 0's " + std::to_string(step) + " (a checkpoint is of one step)");
        require(image.values.size() == image.manifest.total(), "stage " + std::to_string(k) + "'s image",
                image.values.size(), "must hold its manifest's " + std::to_string(image.manifest.total()) + " values");
        registries.push_back(nn::gpt_stage<exec::cpu>::layout(run.model, run.units[k]));
        require(image.manifest.parameters == registries.back().total_size(),
                "parameters of stage " + std::to_string(k) + "'s image", image.manifest.parameters,
                "must be the stage's " + std::to_string(registries.back().total_size()));
    }
    const std::string optimizer_name(optim::any_optimizer<float>(run.optimizer).name());
    std::vector<io::stage_parameters> parameters;
    std::vector<std::vector<optim::state_tensor_view<float>>> views(images.size());
    std::vector<io::stage_optimizer_state> optimizers;
    for (std::size_t k = 0; k < images.size(); ++k) {
        const std::span<const float> all(images[k].values);
        const auto& m = images[k].manifest;
        parameters.push_back({registries[k], all.first(m.parameters)});
        std::uint64_t at = m.parameters;
        for (const auto& [name, count] : m.optimizer_tensors) {
            views[k].push_back({name, all.subspan(at, count)});
            at += count;
        }
        optimizers.push_back({registries[k], optimizer_name, step, views[k]});
    }
    io::staged_checkpoint staged(root, step, "--checkpoint-dir");
    const std::string model = models::gpt::describe(run.model);
    const io::safetensors_metadata metadata{{std::string(train::progress_step_key), std::to_string(step)},
                                            {std::string(train::progress_samples_key), std::to_string(samples)},
                                            {std::string(train::progress_seed_key), std::to_string(run.model.seed)},
                                            {std::string(train::model_key), model}};
    const std::string fingerprint = io::save_checkpoint(staged.path() / train::weights_file_name, parameters, metadata);
    io::save_optimizer_state(staged.path() / train::optimizer_file_name, optimizers,
                             {{std::string(train::weights_fingerprint_key), fingerprint}});
    // Field by field: GCC 12 misreads a designated initializer of the nested layout's string
    // as a read of uninitialised memory (-Wmaybe-uninitialized).
    io::checkpoint_manifest manifest;
    manifest.model = model;
    manifest.optimizer = optimizer_name;
    manifest.step = step;
    manifest.samples = samples;
    manifest.rng_seed = run.model.seed;
    manifest.layout.pp = static_cast<int>(images.size());
    manifest.layout.microbatches = run.microbatches;
    manifest.layout.world = run.workers;
    manifest.layout.schedule = "swarm";
    manifest.run = run.run;
    for (const std::string_view file : {train::weights_file_name, train::optimizer_file_name})
        manifest.files.push_back(io::describe_checkpoint_file(staged.path(), std::string(file)));
    io::write_manifest(staged.path(), manifest);  // last: its presence says the rest is whole
    staged.commit();
    return {staged.target(), staged.publish(keep)};
}

struct swarm_restore {
    io::checkpoint_manifest manifest;
    std::filesystem::path directory;
    std::vector<std::unique_ptr<stage_service>> stages;  // each holding its stage's state of manifest.step
};

// Reads `path` (a checkpoint directory, or a root whose `latest` names one) into one
// stage_service per stage of `units`. Refuses, before anything is loaded, what
// train::load_checkpoint_directory refuses: a torn or foreign checkpoint, a file whose size or
// SHA-256 differs from the manifest, another model or optimizer; `parameter` names the option.
inline swarm_restore load_swarm_checkpoint(const std::filesystem::path& path, const nn::gpt_config& model,
                                           const std::vector<nn::unit_range>& units,
                                           const optim::optimizer_options& optimizer,
                                           std::string_view parameter = "--resume") {
    swarm_restore out;
    out.directory = io::resolve_checkpoint(path, parameter);
    out.manifest = io::read_manifest(out.directory);
    const std::string where = "manifest " + (out.directory / io::manifest_file_name).string();
    const std::string ours = models::gpt::describe(model);
    require(out.manifest.model == ours, "\"model\" of " + where, out.manifest.model,
            "this run's model is \"" + ours + "\"; resume it with the model it was saved from");
    const optim::any_optimizer<float> fresh(optimizer);
    const std::string optimizer_name(fresh.name());
    require(out.manifest.optimizer == optimizer_name, "\"optimizer\" of " + where, out.manifest.optimizer,
            "this run uses " + optimizer_name + "; resume with --optimizer " + out.manifest.optimizer);
    io::verify_checkpoint_files(out.directory, out.manifest, {train::weights_file_name, train::optimizer_file_name});
    const auto weights = io::read_safetensors(out.directory / train::weights_file_name);
    const auto optimizer_file = io::read_safetensors(out.directory / train::optimizer_file_name);
    const auto progress = train::detail::saved_progress(weights);
    require(progress && progress->step == out.manifest.step, "\"step\" of " + where, out.manifest.step,
            "the weights file records " + (progress ? std::to_string(progress->step) : std::string("no step")) +
                ": the files come from different saves, or the manifest was edited");
    const auto names = fresh.state_names();
    for (std::size_t k = 0; k < units.size(); ++k) {
        auto service = std::make_unique<stage_service>(model, static_cast<int>(k), static_cast<int>(units.size()),
                                                       units[k], optimizer);
        const auto& registry = service->registry();
        std::vector<float> parameters(registry.total_size());
        io::load_checkpoint(weights, registry, parameters);
        auto state = io::load_optimizer_state(optimizer_file, registry, optimizer_name, names);
        require(state.steps == out.manifest.step,
                "optimizer step of " + (out.directory / train::optimizer_file_name).string(), state.steps,
                "must equal the manifest's step " + std::to_string(out.manifest.step));
        state_manifest image{state.steps, parameters.size(), {}};
        for (const auto& t : state.tensors) image.optimizer_tensors.emplace_back(t.name, t.values.size());
        service->begin_restore(image);
        service->write_state(0, parameters);
        std::uint64_t at = parameters.size();
        for (const auto& t : state.tensors) {
            service->write_state(at, std::span<const float>(t.values.data(), t.values.size()));
            at += t.values.size();
        }
        service->finish_restore();
        out.stages.push_back(std::move(service));
    }
    return out;
}

}  // namespace weft::swarm
