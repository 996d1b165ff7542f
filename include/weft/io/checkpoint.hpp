// Checkpoints as safetensors files keyed by the parameter registry's global names,
// so a model saved under one pipeline split loads under another and opens in Python;
// the optimizer's state tensors (optim/optimizer_state.hpp: AdamW's moments, SGD's momentum)
// and step count go to a companion file under "<parameter>.<state name>".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/core/dtype.hpp"
#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/io/safetensors.hpp"
#include "weft/optim/optimizer_state.hpp"

namespace weft::io {

// The parameters of one stage this process holds: its registry and flat buffer.
struct stage_parameters {
    const weft::parameter_registry& registry;
    std::span<const float> values;
};

// The optimizer state of one stage this process holds, with the registry its tensors follow:
// each tensor covers the whole registry, or is empty (before the first step, or a buffer
// the optimizer does not keep, such as SGD's momentum without momentum).
struct stage_optimizer_state {
    const weft::parameter_registry& registry;
    std::string_view optimizer;  // "adamw", "sgd": recorded, and checked when loading
    std::uint64_t steps = 0;
    std::span<const optim::state_tensor_view<float>> tensors;
};

// Metadata keys of the optimizer file: the step count, the optimizer's name, and the state
// tensors it holds (comma-separated; a name not listed was empty when saved).
inline constexpr std::string_view optimizer_step_key = "step";
inline constexpr std::string_view optimizer_name_key = "optimizer";
inline constexpr std::string_view optimizer_tensors_key = "state_tensors";

namespace detail {

[[nodiscard]] inline std::string shape_text(std::span<const int> shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) text.append(", ");
        text.append(std::to_string(shape[i]));
    }
    return text.append("]");
}

// Collects F32 tensors from several stages. A name held by two stages (GPT-2's tied
// token embedding, on the first and the last stage) is written once; both copies
// must then be identical, otherwise the checkpoint would silently keep one of them.
class f32_tensor_collector {
public:
    void add(std::string name, std::span<const int> shape, std::span<const float> values, std::size_t stage) {
        const auto bytes = std::as_bytes(values);
        if (const auto it = seen_.find(name); it != seen_.end()) {
            const tensor_record& earlier = records_[it->second.index];
            const std::vector<std::int64_t> this_shape(shape.begin(), shape.end());
            require(earlier.shape == this_shape, "shape of " + name + " in stage " + std::to_string(stage),
                    shape_text(shape),
                    "must equal its shape " + detail::shape_text(std::span<const std::int64_t>(earlier.shape)) +
                        " in stage " + std::to_string(it->second.stage) + " (a tied tensor)");
            if (std::memcmp(earlier.data.data(), bytes.data(), bytes.size()) != 0) {
                std::size_t i = 0;
                float a = 0, b = 0;
                for (; i < values.size(); ++i) {
                    std::memcpy(&a, earlier.data.data() + i * sizeof(float), sizeof(float));
                    b = values[i];
                    if (std::memcmp(&a, &b, sizeof(float)) != 0) break;
                }
                std::ostringstream expected;
                expected.precision(9);
                expected << "must equal its copy in stage " << it->second.stage << " (a tied tensor); element " << i
                         << " is " << a << " there";
                throw invalid_argument("value of " + name + " in stage " + std::to_string(stage) + " at element " +
                                           std::to_string(i),
                                       b, expected.str());
            }
            return;
        }
        seen_.emplace(name, seen{records_.size(), stage});
        records_.push_back({std::move(name), dtype::f32, std::vector<std::int64_t>(shape.begin(), shape.end()),
                            std::vector<std::byte>(bytes.begin(), bytes.end())});
    }

    [[nodiscard]] std::span<const tensor_record> records() const { return records_; }

private:
    struct seen {
        std::size_t index;
        std::size_t stage;
    };
    std::vector<tensor_record> records_;
    std::unordered_map<std::string, seen> seen_;
};

// The F32 tensor `name` of `file`, checked against the shape the registry expects.
[[nodiscard]] inline const tensor_record& find_f32(const safetensors_file& file, const std::string& name,
                                                   std::span<const int> shape) {
    const std::string where = "safetensors file \"" + file.path().string() + "\"";
    if (!file.contains(name))
        throw invalid_argument("tensor name", name, "is missing from " + where + " (the model needs it)");
    const tensor_record& record = file.find(name);
    require(record.type == dtype::f32, "dtype of " + name + " in " + where, to_string(record.type),
            "must be F32 (weft keeps parameters and optimizer state in float)");
    const std::vector<std::int64_t> expected(shape.begin(), shape.end());
    require(record.shape == expected, "shape of " + name + " in " + where,
            detail::shape_text(std::span<const std::int64_t>(record.shape)),
            "must equal the model's shape " + shape_text(shape));
    return record;
}

// Copies the elements `info` holds of the full tensor in `record` into `target`: all of
// it, or a tensor-parallel slice (info.split), run by contiguous run.
inline void copy_f32(const tensor_record& record, const weft::parameter_info& info, std::span<float> target) {
    info.for_each_run([&](std::size_t local, std::size_t global, std::size_t length) {
        std::memcpy(target.data() + local, record.data.data() + global * sizeof(float), length * sizeof(float));
    });
}

// Files hold whole tensors; a slice must be assembled first (train::gather_full_stages).
inline void require_whole(const weft::parameter_info& info) {
    require(info.split.whole(), "tensor " + info.name, "a tensor-parallel slice",
            "checkpoints store whole tensors: gather the slices first (train::gather_full_stages)");
}

template <class Buffer = std::vector<float>>
[[nodiscard]] Buffer read_f32_buffer(const safetensors_file& file, const weft::parameter_registry& registry,
                                     std::string_view suffix) {
    Buffer buffer(registry.total_size());
    for (const weft::parameter_info& info : registry.entries()) {
        const std::string name = info.name + std::string(suffix);
        copy_f32(find_f32(file, name, info.shape), info, std::span(buffer).subspan(info.offset, info.size));
    }
    return buffer;
}

}  // namespace detail

// A 64-bit fingerprint of tensors (names, types, shapes and bytes, in name order), as 16 hex
// digits: an optimizer file records its weights' fingerprint, so that weights and optimizer
// state of two different saves are not loaded as a pair. Not cryptographic: it guards
// against accidents (a save killed between its files, files copied from two runs), fast
// enough (one multiply per 8 bytes) to run on every save and load.
[[nodiscard]] inline std::string weights_fingerprint(std::span<const tensor_record> tensors) {
    std::vector<const tensor_record*> sorted;
    for (const auto& t : tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
    std::uint64_t hash = 0xcbf29ce484222325ull;
    const auto mix = [&hash](std::uint64_t word) {
        hash ^= word;
        hash *= 0x9E3779B97F4A7C15ull;
        hash ^= hash >> 29;
    };
    for (const tensor_record* t : sorted) {
        for (const char c : t->name) mix(static_cast<unsigned char>(c));
        mix(static_cast<std::uint64_t>(t->type));
        for (const std::int64_t d : t->shape) mix(static_cast<std::uint64_t>(d));
        const std::size_t words = t->data.size() / 8;
        for (std::size_t i = 0; i < words; ++i) {
            std::uint64_t word = 0;
            std::memcpy(&word, t->data.data() + 8 * i, 8);
            mix(word);
        }
        for (std::size_t i = 8 * words; i < t->data.size(); ++i) mix(static_cast<std::uint64_t>(t->data[i]));
        mix(t->data.size());
    }
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

// Writes the parameters of the stages this process holds (one file per process), and
// returns their weights_fingerprint.
inline std::string save_checkpoint(const std::filesystem::path& path, std::span<const stage_parameters> stages,
                                   const safetensors_metadata& metadata = {}) {
    detail::f32_tensor_collector tensors;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const stage_parameters& stage = stages[s];
        require(stage.values.size() == stage.registry.total_size(), "parameters of stage " + std::to_string(s),
                stage.values.size(),
                "must hold the registry's " + std::to_string(stage.registry.total_size()) + " elements");
        for (const weft::parameter_info& info : stage.registry.entries()) {
            detail::require_whole(info);
            tensors.add(info.name, info.shape, stage.values.subspan(info.offset, info.size), s);
        }
    }
    write_safetensors(path, tensors.records(), metadata);
    return weights_fingerprint(tensors.records());
}

// Fills one stage's parameters from an open checkpoint by name (a tensor-parallel stage
// takes its slices of the whole tensors); tensors of other stages are ignored.
inline void load_checkpoint(const safetensors_file& file, const weft::parameter_registry& registry,
                            std::span<float> params) {
    require(params.size() == registry.total_size(), "params.size()", params.size(),
            "must equal the registry's " + std::to_string(registry.total_size()) + " elements");
    for (const weft::parameter_info& info : registry.entries())
        detail::copy_f32(detail::find_f32(file, info.name, info.shape), info, params.subspan(info.offset, info.size));
}

inline void load_checkpoint(const std::filesystem::path& path, const weft::parameter_registry& registry,
                            std::span<float> params) {
    load_checkpoint(read_safetensors(path), registry, params);
}

// Writes every stage's state tensors as "<name>.<state name>" (e.g. "h.0.ln_1.weight.exp_avg")
// and the step count, the optimizer and the tensors written as metadata. Tensors must cover
// the whole registry (not a ZeRO range); empty ones (before the first step, or not kept)
// are not written.
inline void save_optimizer_state(const std::filesystem::path& path, std::span<const stage_optimizer_state> stages,
                                 const safetensors_metadata& metadata = {}) {
    for (const std::string_view key : {optimizer_step_key, optimizer_name_key, optimizer_tensors_key})
        require(!metadata.contains(std::string(key)), "metadata key", key,
                "is reserved for the optimizer state file's own records");
    require(!stages.empty(), "optimizer state stages", 0, "must hold at least one stage");
    detail::f32_tensor_collector tensors;
    const stage_optimizer_state& first = stages.front();
    std::vector<std::string_view> written;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const stage_optimizer_state& stage = stages[s];
        require(stage.steps == first.steps, "step count of stage " + std::to_string(s), stage.steps,
                "must equal stage 0's " + std::to_string(first.steps));
        require(stage.optimizer == first.optimizer, "optimizer of stage " + std::to_string(s), stage.optimizer,
                "must equal stage 0's " + std::string(first.optimizer));
        const std::size_t total = stage.registry.total_size();
        for (const auto& tensor : stage.tensors) {
            if (tensor.values.empty()) continue;
            require(tensor.values.size() == total, "optimizer state " + std::string(tensor.name) + " of stage " +
                    std::to_string(s), tensor.values.size(),
                    "must cover the registry's " + std::to_string(total) + " elements (gather a ZeRO range first)");
            if (std::find(written.begin(), written.end(), tensor.name) == written.end())
                written.push_back(tensor.name);
            for (const weft::parameter_info& info : stage.registry.entries()) {
                detail::require_whole(info);
                tensors.add(info.name + "." + std::string(tensor.name), info.shape,
                            tensor.values.subspan(info.offset, info.size), s);
            }
        }
    }
    std::string written_list;
    for (const auto name : written) written_list += (written_list.empty() ? "" : ",") + std::string(name);
    safetensors_metadata all = metadata;
    all.emplace(optimizer_step_key, std::to_string(first.steps));
    all.emplace(optimizer_name_key, first.optimizer);
    all.emplace(optimizer_tensors_key, written_list);
    write_safetensors(path, tensors.records(), all);
}

// One stage's optimizer state from an optimizer file: for each of `names` (the optimizer's
// state tensors, in its order), the whole-registry buffer, or an empty one when the file did
// not write it. Refuses a file of another optimizer, naming both. Files written before the
// optimizer was recorded hold AdamW's moments and load as such.
[[nodiscard]] inline optim::optimizer_state<float> load_optimizer_state(const safetensors_file& file,
                                                                        const weft::parameter_registry& registry,
                                                                        std::string_view optimizer,
                                                                        std::span<const std::string_view> names) {
    const std::string where = "\"" + file.path().string() + "\"";
    const auto step_it = file.metadata().find(std::string(optimizer_step_key));
    if (step_it == file.metadata().end())
        throw invalid_argument("safetensors file", file.path().string(),
                               "has no \"step\" in __metadata__ (is it an optimizer state file?)");
    std::uint64_t steps = 0;
    std::size_t used = 0;
    try {
        steps = std::stoull(step_it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != step_it->second.size() || step_it->second.front() == '-')
        throw invalid_argument("metadata step of " + where, step_it->second, "must be a non-negative integer");
    const auto name_it = file.metadata().find(std::string(optimizer_name_key));
    const std::string saved_by = name_it == file.metadata().end() ? "adamw" : name_it->second;
    require(saved_by == optimizer, "optimizer state file " + where, "state of " + saved_by,
            "must be " + std::string(optimizer) + " state: this run uses " + std::string(optimizer));
    const auto list_it = file.metadata().find(std::string(optimizer_tensors_key));
    const std::string written = list_it == file.metadata().end() ? "exp_avg,exp_avg_sq" : list_it->second;
    auto listed = [&](std::string_view name) {
        std::size_t from = 0;
        while (from <= written.size()) {
            const std::size_t comma = std::min(written.find(',', from), written.size());
            if (std::string_view(written).substr(from, comma - from) == name) return true;
            from = comma + 1;
        }
        return false;
    };
    optim::optimizer_state<float> state{steps, {}};
    for (const std::string_view name : names) {
        state_vector<float> values;
        if (listed(name)) values = detail::read_f32_buffer<state_vector<float>>(file, registry, "." + std::string(name));
        state.tensors.push_back({std::string(name), std::move(values)});
    }
    return state;
}

[[nodiscard]] inline optim::optimizer_state<float> load_optimizer_state(const std::filesystem::path& path,
                                                                        const weft::parameter_registry& registry,
                                                                        std::string_view optimizer,
                                                                        std::span<const std::string_view> names) {
    return load_optimizer_state(read_safetensors(path), registry, optimizer, names);
}

}  // namespace weft::io
