// The weft::models::pipeline_model concept: what the engine needs from a model to train
// it across pipeline stages. A model policy names its config, its batch type and its
// stage type; it says how a micro-batch enters the first stage, how the last stage's
// output becomes a loss, and which tensors several stages share (tied weights).
#pragma once

#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "weft/exec/compute_backend.hpp"
#include "weft/nn/parameter_registry.hpp"
#include "weft/nn/partition.hpp"

namespace weft::models {

// A tensor that lives in more than one unit of the model (e.g. GPT-2's wte, used by the
// embedding and by the LM head). Every stage holding one of the units registers its own
// copy under `name`; the engine sums their gradients so all copies step identically.
struct tied_parameter {
    std::string name;
    std::vector<int> units;
};

template <class M, class Backend>
concept pipeline_model =
    compute_backend<Backend> &&
    requires(const typename M::config& config, const typename M::batch& batch, nn::unit_range units,
             const typename Backend::matrix& logits, typename Backend::scalar scale, int row,
             const typename M::template stage<Backend>& last_stage) {
        typename M::template stage<Backend>;
        // The parameter layout a stage over `units` has, without building its weights
        // (checkpoints use it to receive other ranks' stages).
        { M::template stage<Backend>::layout(config, units) } -> std::same_as<nn::parameter_registry>;
        { M::num_units(config) } -> std::convertible_to<int>;
        { M::validate(config) };
        { M::batch_rows(batch) } -> std::convertible_to<int>;
        // Rows of the activations exchanged between stages for `row` batch rows
        // (samples for the MLP, samples x tokens for GPT).
        { M::activation_rows(config, row) } -> std::convertible_to<int>;
        { M::tied_parameters(config) } -> std::convertible_to<std::vector<tied_parameter>>;
        // The first stage's input for batch rows [first, first + count).
        M::template first_input<Backend>(batch, row, row);
        // Mean loss of rows [first, first + count) and its gradient times `scale`, from the
        // last stage's output; the stage is passed because a tensor-parallel stage holds only
        // its slice of the logits and knows the group that holds the rest.
        M::template loss<Backend>(last_stage, logits, batch, row, row, scale);
    };

template <class M, class Backend>
struct require_pipeline_model {
    static_assert(pipeline_model<M, Backend>,
                  "weft: this type does not model weft::models::pipeline_model (it needs config, batch, "
                  "stage<Backend> with a static layout(config, units), num_units, validate, batch_rows, activation_rows, tied_parameters, "
                  "first_input and loss); see weft/models/pipeline_model.hpp");
};

}  // namespace weft::models
