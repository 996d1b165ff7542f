// One rank's training state as one value: for each pipeline stage the rank holds, its tensors
// (registry, flat parameter and gradient buffers, ZeRO range) and its optimizer with the
// optimizer's state; and how far the run has come (steps, data position, RNG key). The
// engine holds one and computes on it; checkpoints read and write it; a layout switch builds
// a new one from it and an engine around that. Nothing else owns training state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/nn/partition.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/shard/stage_tensors.hpp"

namespace weft::shard {

// What a resumed run needs, besides tensors and optimizer state, to continue exactly where
// this one stopped.
struct training_progress {
    std::uint64_t step = 0;     // training steps taken; a step log continues from here
    std::uint64_t samples = 0;  // the data position: global batch rows consumed
    // The key of the run's counter-based RNG (core/rng.hpp): initial weights were drawn from
    // it by (tensor name, element index), and anything stochastic a step does draws from it
    // by (step, ...), so a resumed run draws the same numbers.
    std::uint64_t rng_seed = 0;
    friend bool operator==(const training_progress&, const training_progress&) = default;
};

// One pipeline stage's training state on this rank.
template <class Scalar>
struct stage_state {
    int index = 0;         // global stage index in the program
    nn::unit_range units;  // the model units it holds
    stage_tensors<Scalar> tensors;
    optim::any_optimizer<Scalar> optimizer;
};

template <class Scalar>
class training_state {
public:
    // The stages this rank holds, in increasing stage index.
    std::vector<stage_state<Scalar>> stages;
    training_progress progress;

    [[nodiscard]] stage_state<Scalar>& stage(int index) {
        for (auto& s : stages)
            if (s.index == index) return s;
        throw invalid_argument("stage", index, "is not held by this rank (it holds " + indices_text() + ")");
    }
    [[nodiscard]] const stage_state<Scalar>& stage(int index) const {
        return const_cast<training_state*>(this)->stage(index);
    }
    [[nodiscard]] bool holds(int index) const {
        for (const auto& s : stages)
            if (s.index == index) return true;
        return false;
    }
    [[nodiscard]] std::vector<int> stage_indices() const {
        std::vector<int> out;
        for (const auto& s : stages) out.push_back(s.index);
        return out;
    }

private:
    [[nodiscard]] std::string indices_text() const {
        std::string text;
        for (const auto& s : stages) text += (text.empty() ? "stages " : ", ") + std::to_string(s.index);
        return text.empty() ? "no stages" : text;
    }
};

// Where a stage of the model sits: its global index and the units it holds.
struct stage_placement {
    int index = 0;
    nn::unit_range units;
};

// The state a rank starts training from: each of `stages` with its tensors drawn as the model
// draws them on tensor-parallel rank `tp_rank` of `tp_size` (whole, ZeRO stage 0's form; a
// sharding policy brings them into its own), a fresh optimizer, and progress at step 0.
template <class Model, class Backend>
[[nodiscard]] training_state<typename Backend::scalar> initial_training_state(
    const typename Model::config& model, std::span<const stage_placement> stages, int tp_rank, int tp_size,
    const optim::optimizer_options& optimizer, std::uint64_t rng_seed) {
    using scalar = typename Backend::scalar;
    using stage_type = typename Model::template stage<Backend>;
    training_state<scalar> state;
    state.progress.rng_seed = rng_seed;
    for (const stage_placement& p : stages) {
        nn::flat_parameters<scalar> tensors = [&] {
            if constexpr (requires { stage_type::initial_tensors(model, p.units, tp_rank, tp_size); })
                return stage_type::initial_tensors(model, p.units, tp_rank, tp_size);
            else {
                require(tp_size == 1, "tp", tp_size, "this model has no tensor-parallel layers; valid: 1");
                return stage_type::initial_tensors(model, p.units);
            }
        }();
        state.stages.push_back({p.index, p.units, stage_tensors<scalar>(std::move(tensors)),
                                optim::any_optimizer<scalar>(optimizer)});
    }
    return state;
}

}  // namespace weft::shard
