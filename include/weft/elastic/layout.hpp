// A parallel layout as an ownership map over the virtual parameter space.
//
// The virtual parameter space is the unsplit model: every element of training state has
// coordinates (tensor name, element index in the whole tensor, row-major) and a kind: the
// parameter value, or one optimizer state tensor (AdamW's exp_avg, exp_avg_sq) at the same
// coordinates. Scalars (the step counter, the data position, the RNG key, the optimizer's
// step count) are the same on every rank and are not part of the space.
//
// A layout says which rank holds which part of it, and where in its buffers: pipeline
// stages hold unit ranges (and so whole tensors), tensor-parallel ranks hold slices
// (weft::tensor_split), data-parallel replicas hold copies, and ZeRO ranks hold a range of
// their stage's flat buffer (shard::flat_shard): parameters too at stage 3, optimizer
// state from stage 1. Everything here is computed from global metadata (the config, the
// schedule's stage placement, the partition and the parameter registries), so every rank
// builds the same layout of every rank without communicating.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/comm/process_grid.hpp"
#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/nn/partition.hpp"
#include "weft/shard/flat_shard.hpp"

namespace weft::elastic {

// What a buffer holds: the parameter values, or the optimizer's state tensors (they are
// laid out alike: the range the optimizer steps).
enum class held_class { parameters, optimizer_state };

// A run of elements of one tensor of the virtual space that one rank holds contiguously in
// one of its stage buffers.
struct segment {
    int tensor = 0;          // index into layout::tensor_names()
    std::size_t global = 0;  // first element in the whole tensor (row-major in its global shape)
    std::size_t length = 0;  // elements
    int rank = 0;            // the rank that holds it
    int stage = 0;           // the stage (global index in this layout) whose buffer holds it
    std::size_t flat = 0;    // first element in that stage's flat layout (registry offsets)
};

// One stage as one rank holds it: the registry of its tensor-parallel slice and the ZeRO
// range of its flat buffer (all of it at ZeRO stage 0).
struct stage_holding {
    int stage = 0;
    nn::unit_range units;
    weft::parameter_registry registry;
    shard::flat_shard range;
};

class layout {
public:
    // The registry of stage `stage` (holding `units`) on tensor-parallel rank `tp_rank` of
    // the config's tp: what a model's stage_type::layout gives.
    using registry_function = std::function<weft::parameter_registry(int stage, nn::unit_range units, int tp_rank)>;

    // `stage_rank[s]`: the pipeline rank running stage s (the schedule's placement);
    // `units[s]`: the model units stage s holds. Ranks [config.world_size(), ...) hold nothing.
    layout(const parallel_config& config, std::vector<int> stage_rank, std::vector<nn::unit_range> units,
           const registry_function& registry_of, std::vector<int> partition = {})
        : config_(config),
          stage_rank_(std::move(stage_rank)),
          units_(std::move(units)),
          partition_(std::move(partition)) {
        require(stage_rank_.size() == units_.size(), "layout stages", stage_rank_.size(),
                "must equal the number of unit ranges " + std::to_string(units_.size()));
        for (std::size_t s = 0; s < stage_rank_.size(); ++s)
            require(stage_rank_[s] >= 0 && stage_rank_[s] < config_.pp(), "pipeline rank of stage " + std::to_string(s),
                    stage_rank_[s], "must be in [0, pp = " + std::to_string(config_.pp()) + ")");
        registries_.resize(units_.size());
        for (std::size_t s = 0; s < units_.size(); ++s)
            for (int t = 0; t < config_.tp(); ++t)
                registries_[s].push_back(registry_of(static_cast<int>(s), units_[s], t));
        for (int r = 0; r < config_.world_size(); ++r) index_tensors_of(r);
    }

    [[nodiscard]] const parallel_config& config() const { return config_; }
    [[nodiscard]] int ranks() const { return config_.world_size(); }
    [[nodiscard]] int num_stages() const { return static_cast<int>(units_.size()); }
    [[nodiscard]] const std::vector<int>& stage_rank() const { return stage_rank_; }
    [[nodiscard]] const std::vector<nn::unit_range>& units() const { return units_; }
    // The partition the layout was asked for (unit counts per stage); empty: the default.
    [[nodiscard]] const std::vector<int>& partition() const { return partition_; }
    // Names of the tensors of the virtual space, in the order they were first met.
    [[nodiscard]] const std::vector<std::string>& tensor_names() const { return tensor_names_; }
    [[nodiscard]] bool holds_anything(int rank) const { return rank >= 0 && rank < ranks(); }

    // The stages `rank` holds, in stage order, with its slice and range of each; none for a
    // rank outside the layout (a spare).
    [[nodiscard]] std::vector<stage_holding> holdings(int rank) const {
        std::vector<stage_holding> out;
        if (!holds_anything(rank)) return out;
        const comm::grid_coordinates c = comm::grid_coordinates_of(rank, config_);
        for (std::size_t s = 0; s < units_.size(); ++s) {
            if (stage_rank_[s] != c.pp_index) continue;
            const weft::parameter_registry& registry = registries_[s][static_cast<std::size_t>(c.tp_index)];
            const int shards = config_.zero_stage() == 0 ? 1 : config_.dp();
            const int shard = config_.zero_stage() == 0 ? 0 : c.dp_index;
            out.push_back(
                {static_cast<int>(s), units_[s], registry, shard::shard_of(registry.total_size(), shards, shard)});
        }
        return out;
    }

    // Every segment of `what` that any rank holds, rank by rank. Parameters are whole stage
    // buffers below ZeRO stage 3 and the rank's range at 3; optimizer state is the whole
    // buffer at ZeRO stage 0 and the range from 1.
    [[nodiscard]] std::vector<segment> segments(held_class what) const {
        std::vector<segment> out;
        for (int r = 0; r < ranks(); ++r) append_segments(r, what, out);
        return out;
    }

    // [first, last) of the flat layout of a held stage that `what` covers on its holder.
    [[nodiscard]] std::pair<std::size_t, std::size_t> held_range(const stage_holding& h, held_class what) const {
        const bool ranged = what == held_class::parameters ? config_.zero_stage() == 3 : config_.zero_stage() >= 1;
        if (!ranged) return {0, h.registry.total_size()};
        return {h.range.offset, h.range.offset + h.range.valid()};
    }

    // "pp=2 dp=2 tp=1 zero=1 chunks=1 microbatches=4 schedule=1f1b world=4", with
    // "partition=3,5" when set: every field of the layout, so that ranks asking for different
    // layouts never describe them alike.
    [[nodiscard]] std::string describe() const {
        const auto& c = config_;
        std::string text = "pp=" + std::to_string(c.pp()) + " dp=" + std::to_string(c.dp()) +
                           " tp=" + std::to_string(c.tp()) + " zero=" + std::to_string(c.zero_stage()) +
                           " chunks=" + std::to_string(c.chunks()) +
                           " microbatches=" + std::to_string(c.microbatches()) +
                           " schedule=" + std::string(c.schedule().name()) + " world=" + std::to_string(c.world_size());
        if (!partition_.empty()) {
            text += " partition=";
            // Appended piece by piece: GCC 12 reports -Wrestrict inside libstdc++ for
            // `const char* + std::string` at -O3 (GCC bug 105651), in users' builds too.
            for (std::size_t i = 0; i < partition_.size(); ++i) {
                if (i > 0) text += ',';
                text += std::to_string(partition_[i]);
            }
        }
        return text;
    }

private:
    void index_tensors_of(int rank) {
        for (const stage_holding& h : holdings(rank))
            for (const weft::parameter_info& info : h.registry.entries())
                if (!tensor_index_.contains(info.name)) {
                    tensor_index_.emplace(info.name, static_cast<int>(tensor_names_.size()));
                    tensor_names_.push_back(info.name);
                }
    }

    void append_segments(int rank, held_class what, std::vector<segment>& out) const {
        for (const stage_holding& h : holdings(rank)) {
            const auto [first, last] = held_range(h, what);
            if (first >= last) continue;
            for (const weft::parameter_info& info : h.registry.entries()) {
                // The tensor's local runs, clipped to [first, last) of the flat layout.
                if (info.offset >= last || info.offset + info.size <= first) continue;
                const int tensor = tensor_index_.at(info.name);
                info.for_each_run([&](std::size_t local, std::size_t global, std::size_t length) {
                    const std::size_t begin = std::max(info.offset + local, first);
                    const std::size_t end = std::min(info.offset + local + length, last);
                    if (begin >= end) return;
                    const std::size_t skip = begin - (info.offset + local);
                    out.push_back({tensor, global + skip, end - begin, rank, h.stage, begin});
                });
            }
        }
    }

    parallel_config config_;
    std::vector<int> stage_rank_;
    std::vector<nn::unit_range> units_;
    std::vector<int> partition_;
    std::vector<std::vector<weft::parameter_registry>> registries_;  // [stage][tp rank]
    std::vector<std::string> tensor_names_;
    std::unordered_map<std::string, int> tensor_index_;
};

}  // namespace weft::elastic
