// Checkpoints of a running engine: save() gathers every stage of the first data-parallel
// replica (its ZeRO ranges first) to its first pipeline rank, which writes one safetensors file with the
// model's global tensor names (a tied tensor once) and, for AdamW, a companion file
// with the moments; load() lets every rank fill its own stages from such files, so a
// checkpoint taken under one layout (pipeline, data-parallel, ZeRO stage) loads under any other.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/nn/parameter_registry.hpp"
#include "weft/io/checkpoint.hpp"
#include "weft/io/safetensors.hpp"

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

// A stage's parameters and AdamW moments over its whole, unsplit layout: gathered from
// the data-parallel group when ZeRO shards them, and assembled from the tensor-parallel
// group's slices. Collective over both groups.
struct full_stage_state {
    int index = 0;
    nn::parameter_registry registry;  // the stage's layout without tensor parallelism
    std::vector<float> parameters;
    std::vector<float> exp_avg, exp_avg_sq;  // AdamW only; zeros before the first step
    std::uint64_t steps = 0;
};

namespace detail {

// Replaces full's per-slice vectors (this tensor-parallel rank's layout) by the whole
// tensors: every rank all-gathers every slice, then places each by its registry's runs
// (replicated tensors are taken from rank 0). Collective over the tensor-parallel group.
template <class Engine>
void assemble_tensor_parallel(Engine& engine, full_stage_state& full) {
    auto& group = engine.tensor_group();
    const int tp = group.size();
    std::vector<nn::parameter_registry> slices;
    std::size_t longest = 0;
    for (int r = 0; r < tp; ++r) {
        slices.push_back(engine.stage_layout(full.index, r));
        longest = std::max(longest, slices.back().total_size());
    }
    const nn::parameter_registry whole =
        Engine::stage_type::layout(engine.model(), engine.stage_units()[static_cast<std::size_t>(full.index)]);
    for (std::vector<float>* values : {&full.parameters, &full.exp_avg, &full.exp_avg_sq}) {
        if (values->empty()) continue;  // SGD: no moments
        // Slices differ in length (uneven vocabulary pieces): all-gather them padded.
        std::vector<float> mine(longest, 0.0f);
        std::copy(values->begin(), values->end(), mine.begin());
        std::vector<float> all(longest * static_cast<std::size_t>(tp));
        group.allgather(std::span<const float>(mine), std::span<float>(all));
        std::vector<float> assembled(whole.total_size());
        for (int r = 0; r < tp; ++r)
            for (const auto& info : slices[static_cast<std::size_t>(r)].entries()) {
                if (info.split.whole() && r != 0) continue;
                const std::size_t to = whole.find(info.name).offset;
                const float* from = all.data() + longest * static_cast<std::size_t>(r) + info.offset;
                info.for_each_run([&](std::size_t local, std::size_t global, std::size_t length) {
                    std::copy(from + local, from + local + length,
                              assembled.begin() + static_cast<std::ptrdiff_t>(to + global));
                });
            }
        *values = std::move(assembled);
    }
    full.registry = whole;
}

}  // namespace detail

template <class Engine>
[[nodiscard]] std::vector<full_stage_state> gather_full_stages(Engine& engine) {
    std::vector<full_stage_state> out;
    engine.with_full_parameters([&](int s, const auto& stage) {
        out.push_back({s, stage.registry(), std::vector<float>(stage.parameters().begin(), stage.parameters().end()),
                       {}, {}, 0});
    });
    for (auto& full : out) {
        auto* opt = engine.stage_optimizer(full.index).adamw();
        if (opt == nullptr) continue;
        full.steps = opt->step_count();
        const auto& sharding = engine.stage_sharding(full.index);
        const auto& range = sharding.shard();
        for (auto [moment, target] :
             {std::pair{opt->exp_avg(), &full.exp_avg}, std::pair{opt->exp_avg_sq(), &full.exp_avg_sq}}) {
            if (sharding.zero_stage() == 0) {
                target->assign(moment.begin(), moment.end());
            } else {
                // This rank's range, zero-padded to the common range length, then all of them.
                std::vector<float> mine(range.size, 0.0f);
                std::copy(moment.begin(), moment.end(), mine.begin());
                target->assign(range.padded, 0.0f);
                engine.data_group().allgather(std::span<const float>(mine), std::span<float>(*target));
            }
            target->resize(range.total, 0.0f);  // a fresh optimizer has no moments yet: zeros
        }
    }
    if (engine.config().tp() > 1)
        for (auto& full : out) detail::assemble_tensor_parallel(engine, full);
    return out;
}

// Collective over the world. Writes `path` (and its optimizer companion when the engine
// runs AdamW) from pipeline rank 0 of data-parallel replica 0; other replicas hold the
// same values (ZeRO ranges are gathered first). Files are written atomically.
template <class Engine>
void save(Engine& engine, const std::filesystem::path& path) {
    static_assert(std::is_same_v<typename Engine::scalar, float>, "checkpoints store F32 tensors");
    std::vector<full_stage_state> local = gather_full_stages(engine);
    // Replica 0's tensor-parallel rank 0 ranks now hold whole stages; they write.
    if (engine.coordinates().dp_index != 0 || engine.coordinates().tp_index != 0) return;
    auto& pipeline = engine.pipeline_group();
    const auto& program = engine.program();
    const bool writer = pipeline.rank() == 0;
    const bool adamw = engine.stage_optimizer(engine.local_stages().front()).adamw() != nullptr;
    // Stages of other ranks, received on the writer only: their layout and full state.
    std::vector<nn::parameter_registry> remote;
    std::vector<full_stage_state> remote_state;
    for (int s = 0; s < program.num_stages; ++s) {
        const int owner = program.stage_rank[static_cast<std::size_t>(s)];
        if (owner == pipeline.rank()) {
            if (writer) continue;
            const auto& full = *std::find_if(local.begin(), local.end(), [&](const auto& f) { return f.index == s; });
            detail::send_floats(pipeline, std::span<const float>(full.parameters), 0);
            if (adamw) {
                const float step[1] = {static_cast<float>(full.steps)};
                detail::send_floats(pipeline, std::span<const float>(full.exp_avg), 0);
                detail::send_floats(pipeline, std::span<const float>(full.exp_avg_sq), 0);
                detail::send_floats(pipeline, std::span<const float>(step), 0);
            }
        } else if (writer) {
            remote.push_back(
                Engine::stage_type::layout(engine.model(), engine.stage_units()[static_cast<std::size_t>(s)]));
            const std::size_t size = remote.back().total_size();
            full_stage_state full{s, remote.back(), std::vector<float>(size), {}, {}, 0};
            detail::receive_floats(pipeline, std::span<float>(full.parameters), owner);
            if (adamw) {
                full.exp_avg.resize(size);
                full.exp_avg_sq.resize(size);
                float step[1] = {0};
                detail::receive_floats(pipeline, std::span<float>(full.exp_avg), owner);
                detail::receive_floats(pipeline, std::span<float>(full.exp_avg_sq), owner);
                detail::receive_floats(pipeline, std::span<float>(step), owner);
                full.steps = static_cast<std::uint64_t>(step[0]);
            }
            remote_state.push_back(std::move(full));
        }
    }
    if (!writer) return;
    std::vector<io::stage_parameters> stages;
    for (const auto& full : local) stages.push_back({full.registry, std::span<const float>(full.parameters)});
    for (std::size_t i = 0; i < remote.size(); ++i)
        stages.push_back({remote[i], std::span<const float>(remote_state[i].parameters)});
    io::save_checkpoint(path, stages);
    if (!adamw) return;
    // Every stage's moments go into an optimizer restored from the full state.
    std::vector<optim::adamw> restored;
    restored.reserve(local.size() + remote.size());
    for (auto* list : {&local, &remote_state})
        for (auto& full : *list) {
            restored.emplace_back(optim::adamw_options{});
            restored.back().restore(full.steps, std::move(full.exp_avg), std::move(full.exp_avg_sq));
        }
    std::vector<io::stage_optimizer> optimizers;
    for (std::size_t i = 0; i < local.size(); ++i)
        optimizers.push_back({local[i].registry, restored[i]});
    for (std::size_t i = 0; i < remote.size(); ++i) optimizers.push_back({remote[i], restored[local.size() + i]});
    io::save_optimizer_state(optimizer_companion(path), optimizers);
}

// Not collective: every rank fills its own stages (under ZeRO, its range of them) from
// `path`, and their AdamW moments from the companion file when it exists (a missing
// companion starts the moments fresh).
template <class Engine>
void load(Engine& engine, const std::filesystem::path& path) {
    const io::safetensors_file weights = io::read_safetensors(path);
    const auto companion_path = optimizer_companion(path);
    const bool has_optimizer = std::filesystem::exists(companion_path);
    const io::safetensors_file moments = has_optimizer ? io::read_safetensors(companion_path) : io::safetensors_file{};
    for (const int s : engine.local_stages()) {
        engine.overwrite_parameters(
            s, [&](auto& stage) { io::load_checkpoint(weights, stage.registry(), stage.parameters()); });
        if (!has_optimizer) continue;
        auto* opt = engine.stage_optimizer(s).adamw();
        require(opt != nullptr, "optimizer state file", companion_path.string(),
                "holds AdamW moments but this run uses SGD; remove the file or use --optimizer adamw");
        const auto& registry = engine.stage(s).registry();
        const auto& sharding = engine.stage_sharding(s);
        if (sharding.zero_stage() == 0) {
            io::load_optimizer_state(moments, registry, *opt);
            continue;
        }
        // Under ZeRO the optimizer keeps moments for this rank's range only.
        optim::adamw full(opt->options());
        io::load_optimizer_state(moments, registry, full);
        const auto& range = sharding.shard();
        auto slice = [&](std::span<const float> moment) {
            if (moment.empty()) return std::vector<float>{};
            const auto first = moment.begin() + static_cast<std::ptrdiff_t>(std::min(range.offset, range.total));
            return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(range.valid()));
        };
        opt->restore(full.step_count(), slice(full.exp_avg()), slice(full.exp_avg_sq()));
    }
}

}  // namespace weft::train
