// What a rank holds of one pipeline stage's parameters and gradients, in the form a sharding
// policy keeps it between steps: the stage's flat buffers (registry, parameters and gradients,
// padded and partly released under ZeRO), this rank's ZeRO range of them, and, under ZeRO-3,
// that range of the parameters alone. It is a plain value: the training state holds one per
// stage, checkpoints read it, and a layout switch moves it; the sharding policies
// (shard/replicate.hpp, shard/zero.hpp) only change its form.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/shard/flat_shard.hpp"

namespace weft::shard {

// Bytes of training state a rank holds for a stage.
struct memory_figures {
    std::size_t parameters = 0;
    std::size_t gradients = 0;
    std::size_t optimizer_state = 0;
    friend memory_figures operator+(memory_figures a, const memory_figures& b) {
        return {a.parameters + b.parameters, a.gradients + b.gradients, a.optimizer_state + b.optimizer_state};
    }
    [[nodiscard]] std::size_t total() const { return parameters + gradients + optimizer_state; }
    friend bool operator==(const memory_figures&, const memory_figures&) = default;
};

template <class Scalar>
struct stage_tensors {
    // Whole, as a stage starts (ZeRO stage 0's form): full buffers, the range is all of them.
    explicit stage_tensors(nn::flat_parameters<Scalar> tensors)
        : full(std::move(tensors)), range(shard_of(full.registry().total_size(), 1, 0)) {}

    // The registry, and the full buffers where this rank holds them (padded to the
    // data-parallel group under ZeRO; released between uses as the ZeRO stage says).
    nn::flat_parameters<Scalar> full;
    // This rank's range of the flat buffers: all of them at ZeRO stage 0.
    flat_shard range;
    // ZeRO-3 between its UNSHARD and RESHARD actions: only this rank's range of the parameters.
    state_vector<Scalar> parameter_range;
    // The form the tensors are in: 0 (whole), or the ZeRO stage 1, 2 or 3 that holds them.
    int zero_stage = 0;
    // During a step in ZeRO's least-memory mode (shard/layer_gather.hpp, shard/layer_reduce.hpp)
    // the full buffers are address space of which only some layers' elements hold memory:
    // these count them. Unset: a full buffer that exists counts whole.
    std::optional<std::size_t> parameters_in_use;
    std::optional<std::size_t> gradients_in_use;

    [[nodiscard]] const weft::parameter_registry& registry() const { return full.registry(); }

    // Parameters and gradients held now (bytes).
    [[nodiscard]] memory_figures held() const {
        memory_figures m;
        const std::size_t parameters = full.holds_parameters() ? parameters_in_use.value_or(full.padded_size()) : 0;
        const std::size_t gradients = full.holds_gradients() ? gradients_in_use.value_or(full.padded_size()) : 0;
        m.parameters = (parameters + parameter_range.size()) * sizeof(Scalar);
        m.gradients = gradients * sizeof(Scalar);
        return m;
    }
};

}  // namespace weft::shard
