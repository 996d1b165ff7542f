// Checkpoints of a running engine: save() gathers every stage of the first data-parallel
// replica (its ZeRO ranges and tensor-parallel slices first) to its first pipeline rank,
// which writes one safetensors file with the model's global tensor names (a tied tensor
// once) and a companion file with the optimizer's state tensors; load() lets every rank
// fill its own stages from such files, so a checkpoint taken under one layout (pipeline,
// data and tensor parallel, ZeRO stage) loads under any other.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "weft/comm/host_side.hpp"
#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/io/checkpoint.hpp"
#include "weft/io/safetensors.hpp"
#include "weft/optim/optimizer_state.hpp"
#include "weft/shard/training_state.hpp"

namespace weft::train {

// Metadata keys of the weights file that carry the run's progress (shard::training_progress),
// so a loaded run continues at the saved step and data position.
inline constexpr std::string_view progress_step_key = "weft.step";
inline constexpr std::string_view progress_samples_key = "weft.samples";
inline constexpr std::string_view progress_seed_key = "weft.rng_seed";
// The model the weights are of (Model::describe, where the model has it).
inline constexpr std::string_view model_key = "weft.model";
// In the optimizer file: the io::weights_fingerprint of the weights saved with it, so a pair
// from two saves (a save killed between its two files, files copied from two runs) is refused.
inline constexpr std::string_view weights_fingerprint_key = "weft.weights_fingerprint";

template <class Model>
concept describable_model = requires(const typename Model::config& c) {
    { Model::describe(c) } -> std::convertible_to<std::string>;
};

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
// Counts cross as 64-bit integers: a float would lose steps past 2^24.
template <class Comm>
void send_count(Comm& comm, std::uint64_t count, int dest) {
    auto request = comm.isend(std::as_bytes(std::span<const std::uint64_t>(&count, 1)), dest, checkpoint_tag);
    request.wait();
}
template <class Comm>
[[nodiscard]] std::uint64_t receive_count(Comm& comm, int source) {
    std::uint64_t count = 0;
    auto request = comm.irecv(std::as_writable_bytes(std::span<std::uint64_t>(&count, 1)), source, checkpoint_tag);
    request.wait();
    return count;
}
// A vector of any length (an optimizer state tensor may be empty): its length, then its values.
template <class Comm>
void send_vector(Comm& comm, std::span<const float> values, int dest) {
    send_count(comm, values.size(), dest);
    if (!values.empty()) send_floats(comm, values, dest);
}
template <class Comm>
[[nodiscard]] state_vector<float> receive_vector(Comm& comm, int source) {
    state_vector<float> values(static_cast<std::size_t>(receive_count(comm, source)));
    if (!values.empty()) receive_floats(comm, std::span<float>(values), source);
    return values;
}

}  // namespace detail

// A stage's parameters and optimizer state over its whole, unsplit layout: gathered from
// the data-parallel group when ZeRO shards them, and assembled from the tensor-parallel
// group's slices. Collective over both groups.
struct full_stage_state {
    int index = 0;
    weft::parameter_registry registry;  // the stage's layout without tensor parallelism
    std::vector<float> parameters;
    optim::optimizer_state<float> optimizer;  // each tensor whole, or empty (not kept yet)
};

namespace detail {

// Replaces full's per-slice vectors (this tensor-parallel rank's layout) by the whole
// tensors: every rank all-gathers every slice, then places each by its registry's runs
// (replicated tensors are taken from rank 0). Collective over the tensor-parallel group.
template <class Engine>
void assemble_tensor_parallel(Engine& engine, full_stage_state& full) {
    auto& group = engine.parts().tensor_group();
    const int tp = group.size();
    std::vector<weft::parameter_registry> slices;
    std::size_t longest = 0;
    for (int r = 0; r < tp; ++r) {
        slices.push_back(engine.parts().stage_layout(full.index, r));
        longest = std::max(longest, slices.back().total_size());
    }
    const weft::parameter_registry whole =
        Engine::stage_type::layout(engine.model(), engine.parts().stage_units()[static_cast<std::size_t>(full.index)]);
    const auto assemble = [&](auto& values) {
        if (values.empty()) return;  // a state tensor not kept (yet)
        // Slices differ in length (uneven vocabulary pieces): all-gather them padded.
        std::vector<float> mine(longest, 0.0f);
        std::copy(values.begin(), values.end(), mine.begin());
        std::vector<float> all(longest * static_cast<std::size_t>(tp));
        group.allgather(std::span<const float>(mine), std::span<float>(all));
        std::remove_reference_t<decltype(values)> assembled(whole.total_size());
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
        values = std::move(assembled);
    };
    assemble(full.parameters);
    for (auto& tensor : full.optimizer.tensors) assemble(tensor.values);
    full.registry = whole;
}

}  // namespace detail

template <class Engine>
[[nodiscard]] std::vector<full_stage_state> gather_full_stages(Engine& engine) {
    std::vector<full_stage_state> out;
    engine.parts().with_full_parameters([&](int s, const auto& stage) {
        out.push_back({s, stage.registry(), std::vector<float>(stage.parameters().begin(), stage.parameters().end()),
                       {}});
    });
    for (auto& full : out) {
        const auto& optimizer = engine.parts().stage_optimizer(full.index);
        const auto& sharding = engine.parts().stage_sharding(full.index);
        const auto& range = sharding.shard();
        full.optimizer.steps = optimizer.step_count();
        for (const auto& view : optimizer.state_views()) {
            state_vector<float> whole;
            if (sharding.zero_stage() == 0) {
                whole.assign(view.values.begin(), view.values.end());
            } else {
                // A tensor no rank holds (before the first step, or SGD's momentum without
                // momentum) stays empty; a rank whose range is all padding holds an empty range
                // of a kept tensor. The group agrees which case it is before gathering.
                double held[1] = {static_cast<double>(view.values.size())};
                engine.parts().data_group().allreduce_sum(std::span<double>(held));
                if (held[0] > 0) {
                    // This rank's range, zero-padded to the common range length, then all of them.
                    std::vector<float> mine(range.size, 0.0f);
                    std::copy(view.values.begin(), view.values.end(), mine.begin());
                    whole.assign(range.padded, 0.0f);
                    engine.parts().data_group().allgather(std::span<const float>(mine), std::span<float>(whole));
                    whole.resize(range.total);
                }
            }
            full.optimizer.tensors.push_back({std::string(view.name), std::move(whole)});
        }
    }
    if (engine.config().tp() > 1)
        for (auto& full : out) detail::assemble_tensor_parallel(engine, full);
    return out;
}

// Whether this rank writes checkpoints: pipeline rank 0 of data-parallel replica 0 and
// tensor-parallel rank 0, which receives every stage's whole state.
template <class Engine>
[[nodiscard]] bool is_checkpoint_writer(Engine& engine) {
    return engine.parts().coordinates().dp_index == 0 && engine.parts().coordinates().tp_index == 0 &&
           engine.parts().pipeline_group().rank() == 0;
}

// Collective over the world. Writes the weights to `path` and the optimizer state to
// `optimizer_path` from the checkpoint writer (is_checkpoint_writer); other replicas hold
// the same values (ZeRO ranges are gathered first). Files are written atomically.
template <class Engine>
void save(Engine& engine, const std::filesystem::path& path, const std::filesystem::path& optimizer_path) {
    static_assert(std::is_same_v<typename Engine::scalar, float>, "checkpoints store F32 tensors");
    std::vector<full_stage_state> local = gather_full_stages(engine);
    // Replica 0's tensor-parallel rank 0 ranks now hold whole stages; they write.
    if (engine.parts().coordinates().dp_index != 0 || engine.parts().coordinates().tp_index != 0) return;
    // Host memory point to point, read on the host: the pipeline group's host side
    // (comm/host_side.hpp), which a device communicator such as NCCL pairs with.
    auto& pipeline = comm::host_side(engine.parts().pipeline_group());
    const auto& program = engine.parts().program();
    const bool writer = pipeline.rank() == 0;
    const auto& optimizer = engine.parts().stage_optimizer(engine.parts().local_stages().front());
    // Stages of other ranks, received on the writer only: their full state.
    std::vector<full_stage_state> remote;
    for (int s = 0; s < program.num_stages; ++s) {
        const int owner = program.stage_rank[static_cast<std::size_t>(s)];
        if (owner == pipeline.rank()) {
            if (writer) continue;
            const auto& full = *std::find_if(local.begin(), local.end(), [&](const auto& f) { return f.index == s; });
            detail::send_floats(pipeline, std::span<const float>(full.parameters), 0);
            detail::send_count(pipeline, full.optimizer.steps, 0);
            for (const auto& tensor : full.optimizer.tensors) detail::send_vector(pipeline, tensor.values, 0);
        } else if (writer) {
            full_stage_state full{
                s, Engine::stage_type::layout(engine.model(), engine.parts().stage_units()[static_cast<std::size_t>(s)]), {},
                {}};
            full.parameters.resize(full.registry.total_size());
            detail::receive_floats(pipeline, std::span<float>(full.parameters), owner);
            full.optimizer.steps = detail::receive_count(pipeline, owner);
            for (const auto name : optimizer.state_names())
                full.optimizer.tensors.push_back({std::string(name), detail::receive_vector(pipeline, owner)});
            remote.push_back(std::move(full));
        }
    }
    if (!writer) return;
    std::vector<io::stage_parameters> stages;
    std::vector<std::vector<optim::state_tensor_view<float>>> views;
    std::vector<io::stage_optimizer_state> optimizers;
    views.reserve(local.size() + remote.size());
    for (const auto* list : {&local, &remote})
        for (const auto& full : *list) {
            stages.push_back({full.registry, std::span<const float>(full.parameters)});
            auto& tensors = views.emplace_back();
            for (const auto& t : full.optimizer.tensors) tensors.push_back({t.name, t.values});
            optimizers.push_back({full.registry, optimizer.name(), full.optimizer.steps, tensors});
        }
    const auto& progress = engine.progress();
    io::safetensors_metadata metadata{{std::string(progress_step_key), std::to_string(progress.step)},
                                      {std::string(progress_samples_key), std::to_string(progress.samples)},
                                      {std::string(progress_seed_key), std::to_string(progress.rng_seed)}};
    if constexpr (describable_model<typename Engine::model_type>)
        metadata.emplace(std::string(model_key), Engine::model_type::describe(engine.model()));
    const std::string fingerprint = io::save_checkpoint(path, stages, metadata);
    io::save_optimizer_state(optimizer_path, optimizers, {{std::string(weights_fingerprint_key), fingerprint}});
}

// save() with the optimizer state in the companion file next to `path`.
template <class Engine>
void save(Engine& engine, const std::filesystem::path& path) {
    save(engine, path, optimizer_companion(path));
}

namespace detail {

// The progress a weights file records, or nothing for a file without it (weights from
// elsewhere: training starts at step 0 on them).
[[nodiscard]] inline std::optional<shard::training_progress> saved_progress(const io::safetensors_file& file) {
    const auto& metadata = file.metadata();
    if (!metadata.contains(std::string(progress_step_key))) return std::nullopt;
    auto number = [&](std::string_view key) {
        const auto it = metadata.find(std::string(key));
        require(it != metadata.end(), "metadata " + std::string(key) + " of \"" + file.path().string() + "\"",
                "missing", "a checkpoint with weft.step records weft.samples and weft.rng_seed too");
        std::uint64_t value = 0;
        std::size_t used = 0;
        try {
            value = std::stoull(it->second, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        require(used != 0 && used == it->second.size() && it->second.front() != '-',
                "metadata " + std::string(key) + " of \"" + file.path().string() + "\"", it->second,
                "must be a non-negative integer");
        return value;
    };
    return shard::training_progress{number(progress_step_key), number(progress_samples_key), number(progress_seed_key)};
}

// Refuses weights of another model: a tensor the model does not have (a 2-layer checkpoint
// loaded into 1 layer), or a recorded model description that differs (heads change no shape).
// Shapes and missing tensors are checked as each stage loads.
template <class Engine>
void require_same_model(const Engine& engine, const io::safetensors_file& weights) {
    const std::string where = "\"" + weights.path().string() + "\"";
    std::set<std::string> names;
    for (std::size_t s = 0; s < engine.parts().stage_units().size(); ++s) {
        const weft::parameter_registry layout = engine.parts().stage_layout(static_cast<int>(s), 0);
        for (const auto& info : layout.entries()) names.insert(info.name);
    }
    for (const auto& tensor : weights.tensors())
        if (!names.contains(tensor.name))
            throw error("tensor " + tensor.name + " of " + where +
                        " is not part of this model: the file holds another model (more layers, or another "
                        "architecture); nothing was loaded");
    if constexpr (describable_model<typename Engine::model_type>) {
        const auto it = weights.metadata().find(std::string(model_key));
        const std::string ours = Engine::model_type::describe(engine.model());
        if (it != weights.metadata().end())
            require(it->second == ours, "metadata " + std::string(model_key) + " of " + where, it->second,
                    "this run's model is \"" + ours + "\"; load it into the model it was saved from");
    }
}

}  // namespace detail

// Not collective: every rank fills its own stages (under ZeRO, its range of them) from
// `path`, their optimizer state from the companion file, and the run's progress (step,
// data position, RNG key) when the file records it, so training continues as if it had not
// stopped. Weights of another model are refused. A weft checkpoint (one that records its
// progress) must have its companion; weights from elsewhere may come without one, and
// then the optimizer starts fresh.
template <class Engine>
void load(Engine& engine, const std::filesystem::path& path, const std::filesystem::path& companion_path) {
    const io::safetensors_file weights = io::read_safetensors(path);
    detail::require_same_model(engine, weights);
    const std::optional<shard::training_progress> progress = detail::saved_progress(weights);
    const bool has_optimizer = std::filesystem::exists(companion_path);
    require(has_optimizer || !progress, "optimizer companion", companion_path.string(),
            "must exist: a weft checkpoint that records its progress is saved with it (is this a torn or "
            "partial copy?); copy both files");
    const io::safetensors_file companion =
        has_optimizer ? io::read_safetensors(companion_path) : io::safetensors_file{};
    if (has_optimizer) {
        // Optimizer files written before fingerprints were recorded carry none.
        const auto recorded = companion.metadata().find(std::string(weights_fingerprint_key));
        if (recorded != companion.metadata().end()) {
            const std::string actual = io::weights_fingerprint(weights.tensors());
            require(recorded->second == actual, "optimizer companion", companion_path.string(),
                    "must come from the same save as \"" + path.string() + "\" (it was saved with weights of "
                    "fingerprint " + recorded->second + ", these are " + actual + "): a save was interrupted "
                    "between the two files, or they were copied from two runs; nothing was loaded");
        }
    }
    for (const int s : engine.parts().local_stages()) {
        engine.parts().overwrite_parameters(
            s, [&](auto& stage) { io::load_checkpoint(weights, stage.registry(), stage.parameters()); });
        if (!has_optimizer) continue;
        auto& optimizer = engine.parts().stage_optimizer(s);
        const auto names = optimizer.state_names();
        optim::optimizer_state<float> state =
            io::load_optimizer_state(companion, engine.parts().stage(s).registry(), optimizer.name(), names);
        const auto& sharding = engine.parts().stage_sharding(s);
        if (sharding.zero_stage() != 0) {
            // Under ZeRO the optimizer keeps its state for this rank's range only.
            const auto& range = sharding.shard();
            for (auto& tensor : state.tensors) {
                if (tensor.values.empty()) continue;
                const auto first =
                    tensor.values.begin() + static_cast<std::ptrdiff_t>(std::min(range.offset, range.total));
                tensor.values = state_vector<float>(first, first + static_cast<std::ptrdiff_t>(range.valid()));
            }
        }
        optimizer.import_state(std::move(state));
    }
    if (progress) engine.parts().set_progress(*progress);
}

// load() with the optimizer state from the companion file next to `path`.
template <class Engine>
void load(Engine& engine, const std::filesystem::path& path) {
    load(engine, path, optimizer_companion(path));
}

}  // namespace weft::train
