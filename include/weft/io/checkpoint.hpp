// Checkpoints as safetensors files keyed by the parameter registry's global names,
// so a model saved under one pipeline split loads under another and opens in Python;
// AdamW's moments and step count go to a companion file with the same names.
#pragma once

#include <cstddef>
#include <cstdint>
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
#include "weft/nn/parameter_registry.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/io/safetensors.hpp"

namespace weft::io {

// The parameters of one stage this process holds: its registry and flat buffer.
struct stage_parameters {
    const nn::parameter_registry& registry;
    std::span<const float> values;
};

// The optimizer of one stage this process holds, with the registry its moments follow.
struct stage_optimizer {
    const nn::parameter_registry& registry;
    const optim::adamw& optimizer;
};

// Metadata key under which the optimizer file records AdamW's step count.
inline constexpr std::string_view optimizer_step_key = "step";

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
inline void copy_f32(const tensor_record& record, const nn::parameter_info& info, std::span<float> target) {
    info.for_each_run([&](std::size_t local, std::size_t global, std::size_t length) {
        std::memcpy(target.data() + local, record.data.data() + global * sizeof(float), length * sizeof(float));
    });
}

// Files hold whole tensors; a slice must be assembled first (train::gather_full_stages).
inline void require_whole(const nn::parameter_info& info) {
    require(info.split.whole(), "tensor " + info.name, "a tensor-parallel slice",
            "checkpoints store whole tensors: gather the slices first (train::gather_full_stages)");
}

[[nodiscard]] inline std::vector<float> read_f32_buffer(const safetensors_file& file,
                                                        const nn::parameter_registry& registry,
                                                        std::string_view suffix) {
    std::vector<float> buffer(registry.total_size());
    for (const nn::parameter_info& info : registry.entries()) {
        const std::string name = info.name + std::string(suffix);
        copy_f32(find_f32(file, name, info.shape), info, std::span(buffer).subspan(info.offset, info.size));
    }
    return buffer;
}

}  // namespace detail

// Writes the parameters of the stages this process holds (one file per process).
inline void save_checkpoint(const std::filesystem::path& path, std::span<const stage_parameters> stages,
                            const safetensors_metadata& metadata = {}) {
    detail::f32_tensor_collector tensors;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const stage_parameters& stage = stages[s];
        require(stage.values.size() == stage.registry.total_size(), "parameters of stage " + std::to_string(s),
                stage.values.size(),
                "must hold the registry's " + std::to_string(stage.registry.total_size()) + " elements");
        for (const nn::parameter_info& info : stage.registry.entries()) {
            detail::require_whole(info);
            tensors.add(info.name, info.shape, stage.values.subspan(info.offset, info.size), s);
        }
    }
    write_safetensors(path, tensors.records(), metadata);
}

// Fills one stage's parameters from an open checkpoint by name (a tensor-parallel stage
// takes its slices of the whole tensors); tensors of other stages are ignored.
inline void load_checkpoint(const safetensors_file& file, const nn::parameter_registry& registry,
                            std::span<float> params) {
    require(params.size() == registry.total_size(), "params.size()", params.size(),
            "must equal the registry's " + std::to_string(registry.total_size()) + " elements");
    for (const nn::parameter_info& info : registry.entries())
        detail::copy_f32(detail::find_f32(file, info.name, info.shape), info, params.subspan(info.offset, info.size));
}

inline void load_checkpoint(const std::filesystem::path& path, const nn::parameter_registry& registry,
                            std::span<float> params) {
    load_checkpoint(read_safetensors(path), registry, params);
}

// Writes AdamW's moments as "<name>.exp_avg" / "<name>.exp_avg_sq" and its step count as
// metadata "step". Moments must cover the whole registry (not a ZeRO shard); before the
// first step they are written as zeros.
inline void save_optimizer_state(const std::filesystem::path& path, std::span<const stage_optimizer> stages,
                                 const safetensors_metadata& metadata = {}) {
    require(!metadata.contains(std::string(optimizer_step_key)), "metadata key", optimizer_step_key,
            "is reserved for the optimizer's step count");
    detail::f32_tensor_collector tensors;
    std::uint64_t steps = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const stage_optimizer& stage = stages[s];
        const std::uint64_t stage_steps = stage.optimizer.step_count();
        if (s == 0) steps = stage_steps;
        require(stage_steps == steps, "step count of stage " + std::to_string(s), stage_steps,
                "must equal stage 0's " + std::to_string(steps));
        const std::size_t total = stage.registry.total_size();
        std::vector<float> zeros;
        std::span<const float> m = stage.optimizer.exp_avg();
        std::span<const float> v = stage.optimizer.exp_avg_sq();
        if (stage_steps == 0) {
            zeros.assign(total, 0.0f);
            m = v = zeros;
        }
        require(m.size() == total && v.size() == total, "optimizer moments of stage " + std::to_string(s), m.size(),
                "must cover the registry's " + std::to_string(total) + " elements (sharded state is not supported)");
        for (const nn::parameter_info& info : stage.registry.entries()) {
            detail::require_whole(info);
            tensors.add(info.name + ".exp_avg", info.shape, m.subspan(info.offset, info.size), s);
            tensors.add(info.name + ".exp_avg_sq", info.shape, v.subspan(info.offset, info.size), s);
        }
    }
    safetensors_metadata all = metadata;
    all.emplace(optimizer_step_key, std::to_string(steps));
    write_safetensors(path, tensors.records(), all);
}

// Restores one stage's AdamW state (moments and step count) from an optimizer file.
inline void load_optimizer_state(const safetensors_file& file, const nn::parameter_registry& registry,
                                 optim::adamw& optimizer) {
    const auto it = file.metadata().find(std::string(optimizer_step_key));
    if (it == file.metadata().end())
        throw invalid_argument("safetensors file", file.path().string(),
                               "has no \"step\" in __metadata__ (is it an optimizer state file?)");
    std::uint64_t steps = 0;
    std::size_t used = 0;
    try {
        steps = std::stoull(it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != it->second.size() || it->second.front() == '-')
        throw invalid_argument("metadata step of \"" + file.path().string() + "\"", it->second,
                               "must be a non-negative integer");
    std::vector<float> m = detail::read_f32_buffer(file, registry, ".exp_avg");
    std::vector<float> v = detail::read_f32_buffer(file, registry, ".exp_avg_sq");
    if (steps == 0) {  // restore() keeps a fresh optimizer's empty moments
        m.clear();
        v.clear();
    }
    optimizer.restore(steps, std::move(m), std::move(v));
}

inline void load_optimizer_state(const std::filesystem::path& path, const nn::parameter_registry& registry,
                                 optim::adamw& optimizer) {
    load_optimizer_state(read_safetensors(path), registry, optimizer);
}

}  // namespace weft::io
