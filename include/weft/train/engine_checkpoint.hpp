// Checkpoints of a running engine: save() gathers every stage of the first data-parallel
// replica to its first pipeline rank, which writes one safetensors file with the
// model's global tensor names (a tied tensor once) and, for AdamW, a companion file
// with the moments; load() lets every rank fill its own stages from such files, so a
// checkpoint taken under one pipeline layout loads under any other.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/nn/parameter_registry.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/safetensors.hpp"

namespace weft::train {

// "run/model.safetensors" -> "run/model.optimizer.safetensors".
[[nodiscard]] inline std::filesystem::path optimizer_companion(const std::filesystem::path& checkpoint) {
    std::filesystem::path companion = checkpoint;
    companion.replace_extension();
    companion += ".optimizer.safetensors";
    return companion;
}

namespace detail {

inline constexpr int checkpoint_tag = 32000;  // above the engine's activation tags

template <class Comm>
void send_floats(Comm& comm, std::span<const float> values, int dest) {
    auto request = comm.isend(std::as_bytes(values), dest, checkpoint_tag);
    request.wait();
}
template <class Comm>
void receive_floats(Comm& comm, std::span<float> values, int source) {
    auto request = comm.irecv(std::as_writable_bytes(values), source, checkpoint_tag);
    request.wait();
}

}  // namespace detail

// Collective over the world. Writes `path` (and its optimizer companion when the engine
// runs AdamW) from pipeline rank 0 of data-parallel replica 0; other replicas hold the
// same values. Files are written atomically.
template <class Engine>
void save(Engine& engine, const std::filesystem::path& path) {
    static_assert(std::is_same_v<typename Engine::scalar, float>, "checkpoints store F32 tensors");
    if (engine.coordinates().dp_index != 0) return;
    auto& pipeline = engine.pipeline_group();
    const auto& program = engine.program();
    const bool writer = pipeline.rank() == 0;
    // Stages of other ranks, received on the writer only: their layout and values.
    std::vector<nn::parameter_registry> remote;
    std::vector<std::vector<float>> remote_params, remote_m, remote_v;
    remote.reserve(static_cast<std::size_t>(program.num_stages));
    bool adamw = engine.stage_optimizer(engine.local_stages().front()).adamw() != nullptr;
    std::vector<std::uint64_t> steps;
    for (int s = 0; s < program.num_stages; ++s) {
        const int owner = program.stage_rank[static_cast<std::size_t>(s)];
        if (owner == pipeline.rank()) {
            if (writer) continue;
            auto& stage = engine.mutable_stage(s);
            detail::send_floats(pipeline, std::span<const float>(stage.parameters()), 0);
            if (auto* opt = engine.stage_optimizer(s).adamw()) {
                // A fresh optimizer has no moments yet: send zeros of the right size.
                std::vector<float> m(opt->exp_avg().begin(), opt->exp_avg().end());
                std::vector<float> v(opt->exp_avg_sq().begin(), opt->exp_avg_sq().end());
                m.resize(stage.parameters().size());
                v.resize(stage.parameters().size());
                float step[1] = {static_cast<float>(opt->step_count())};
                detail::send_floats(pipeline, std::span<const float>(m), 0);
                detail::send_floats(pipeline, std::span<const float>(v), 0);
                detail::send_floats(pipeline, std::span<const float>(step), 0);
            }
        } else if (writer) {
            remote.push_back(
                Engine::stage_type::layout(engine.model(), engine.stage_units()[static_cast<std::size_t>(s)]));
            const std::size_t size = remote.back().total_size();
            remote_params.emplace_back(size);
            detail::receive_floats(pipeline, std::span<float>(remote_params.back()), owner);
            if (adamw) {
                remote_m.emplace_back(size);
                remote_v.emplace_back(size);
                float step[1] = {0};
                detail::receive_floats(pipeline, std::span<float>(remote_m.back()), owner);
                detail::receive_floats(pipeline, std::span<float>(remote_v.back()), owner);
                detail::receive_floats(pipeline, std::span<float>(step), owner);
                steps.push_back(static_cast<std::uint64_t>(step[0]));
            }
        }
    }
    if (!writer) return;
    std::vector<stage_parameters> stages;
    for (const int s : engine.local_stages())
        stages.push_back({engine.stage(s).registry(), std::span<const float>(engine.stage(s).parameters())});
    for (std::size_t i = 0; i < remote.size(); ++i)
        stages.push_back({remote[i], std::span<const float>(remote_params[i])});
    save_checkpoint(path, stages);
    if (!adamw) return;
    // Remote moments go into optimizers restored from what the owners sent.
    std::vector<optim::adamw> restored;
    restored.reserve(remote.size());
    for (std::size_t i = 0; i < remote.size(); ++i) {
        restored.emplace_back(optim::adamw_options{});
        restored.back().restore(steps[i], std::move(remote_m[i]), std::move(remote_v[i]));
    }
    std::vector<stage_optimizer> optimizers;
    for (const int s : engine.local_stages())
        optimizers.push_back({engine.stage(s).registry(), *engine.stage_optimizer(s).adamw()});
    for (std::size_t i = 0; i < remote.size(); ++i) optimizers.push_back({remote[i], restored[i]});
    save_optimizer_state(optimizer_companion(path), optimizers);
}

// Not collective: every rank fills its own stages from `path`, and their AdamW moments
// from the companion file when it exists (a missing companion starts the moments fresh).
template <class Engine>
void load(Engine& engine, const std::filesystem::path& path) {
    const safetensors_file weights = read_safetensors(path);
    const auto companion_path = optimizer_companion(path);
    const bool has_optimizer = std::filesystem::exists(companion_path);
    const safetensors_file moments = has_optimizer ? read_safetensors(companion_path) : safetensors_file{};
    for (const int s : engine.local_stages()) {
        auto& stage = engine.mutable_stage(s);
        load_checkpoint(weights, stage.registry(), stage.parameters());
        if (has_optimizer) {
            auto* opt = engine.stage_optimizer(s).adamw();
            require(opt != nullptr, "optimizer state file", companion_path.string(),
                    "holds AdamW moments but this run uses SGD; remove the file or use --optimizer adamw");
            load_optimizer_state(moments, stage.registry(), *opt);
        }
    }
}

}  // namespace weft::train
