// The weft::models::pipeline_model concept: what the engine needs from a model to train it
// across pipeline stages. A model policy names its config, its batch type and its stage
// type; it says how its stages are laid out and drawn, how a micro-batch enters the first
// stage, how the last stage's output becomes a loss, and which tensors several stages share
// (tied weights). The concept is composed of small named ones, and require_pipeline_model
// names the first one a type misses.
#pragma once

#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/tensor_parallel.hpp"

namespace weft::models {

// A tensor that lives in more than one unit of the model (e.g. GPT-2's wte, used by the
// embedding and by the LM head). Every stage holding one of the units registers its own
// copy under `name`; the engine sums their gradients so all copies step identically.
struct tied_parameter {
    std::string name;
    std::vector<int> units;
};

// The types a model is made of: its configuration and its global batch.
template <class M>
concept model_types = requires {
    typename M::config;
    typename M::batch;
};

// A model cut into units (layers) that stages hold in contiguous ranges: how many units
// there are, whether a config is valid, and for a stage over some units its parameter layout
// and its initial tensors, without building it (training states and checkpoints use them).
template <class M, class Backend>
concept partitioned_model = model_types<M> &&
    requires(const typename M::config& config, nn::unit_range units) {
        typename M::template stage<Backend>;
        { M::num_units(config) } -> std::convertible_to<int>;
        { M::validate(config) };
        { M::template stage<Backend>::layout(config, units) } -> std::same_as<weft::parameter_registry>;
        { M::template stage<Backend>::initial_tensors(config, units) }
            -> std::same_as<nn::flat_parameters<typename Backend::scalar>>;
    };

// What the stage runner calls on one stage: built over borrowed tensors on a backend object,
// forward into a stash, the input half and the weight half of backward.
template <class M, class Backend>
concept runnable_stages = partitioned_model<M, Backend> &&
    std::constructible_from<typename M::template stage<Backend>, Backend&, const typename M::config&, nn::unit_range,
                            nn::flat_parameters<typename Backend::scalar>&> &&
    requires(typename M::template stage<Backend>& stage, const typename M::template stage<Backend>& cstage,
             typename M::template stage<Backend>::stash& stash, typename Backend::matrix m) {
        { stash.bytes() } -> std::convertible_to<std::size_t>;
        { cstage.forward(m, stash) } -> std::same_as<typename Backend::matrix>;
        { cstage.backward_input(std::move(m), stash) } -> std::same_as<typename Backend::matrix>;
        stage.backward_weight(stash);
        { cstage.is_first() } -> std::convertible_to<bool>;
        { cstage.is_last() } -> std::convertible_to<bool>;
        { cstage.input_width() } -> std::convertible_to<int>;
        { cstage.output_width() } -> std::convertible_to<int>;
        { stage.tensors() } -> std::same_as<nn::flat_parameters<typename Backend::scalar>&>;
    };

// How a global batch feeds the pipeline: its rows, the rows of the activations exchanged
// between stages for some batch rows (samples for the MLP, samples x tokens for GPT), and
// the first stage's input for batch rows [first, first + count).
template <class M, class Backend>
concept batched_model = model_types<M> &&
    requires(Backend& backend, const typename M::config& config, const typename M::batch& batch, int row) {
        { M::batch_rows(batch) } -> std::convertible_to<int>;
        { M::activation_rows(config, row) } -> std::convertible_to<int>;
        M::template first_input<Backend>(backend, batch, row, row);
    };

// Mean loss of batch rows [first, first + count) and its gradient times `scale`, from the
// last stage's output; the stage is passed because a tensor-parallel stage holds only its
// slice of the logits and knows the group that holds the rest.
template <class M, class Backend>
concept model_loss = partitioned_model<M, Backend> &&
    requires(const typename M::batch& batch, const typename Backend::matrix& logits, typename Backend::scalar scale,
             int row, const typename M::template stage<Backend>& last_stage) {
        { M::template loss<Backend>(last_stage, logits, batch, row, row, scale).loss };
        { M::template loss<Backend>(last_stage, logits, batch, row, row, scale).dlogits }
            -> std::convertible_to<typename Backend::matrix>;
    };

// The tensors several units share.
template <class M>
concept tied_model = model_types<M> && requires(const typename M::config& config) {
    { M::tied_parameters(config) } -> std::convertible_to<std::vector<tied_parameter>>;
};

// Stages that split their tensors over a tensor-parallel group (GPT-2): their layout and
// initial tensors on any tp rank, and a constructor taking the group. A model without them
// runs with tp = 1 only.
template <class M, class Backend>
concept tensor_parallel_stages = partitioned_model<M, Backend> &&
    std::constructible_from<typename M::template stage<Backend>, Backend&, const typename M::config&, nn::unit_range,
                            nn::flat_parameters<typename Backend::scalar>&, nn::tp_group<typename Backend::scalar>> &&
    requires(const typename M::config& config, nn::unit_range units, int rank) {
        { M::template stage<Backend>::layout(config, units, rank, rank) } -> std::same_as<weft::parameter_registry>;
        { M::template stage<Backend>::initial_tensors(config, units, rank, rank) }
            -> std::same_as<nn::flat_parameters<typename Backend::scalar>>;
    };

template <class M, class Backend>
concept pipeline_model = compute_backend<Backend> && model_types<M> && partitioned_model<M, Backend> &&
                         runnable_stages<M, Backend> && batched_model<M, Backend> && model_loss<M, Backend> &&
                         tied_model<M>;

namespace detail {
// The first part of the interface M lacks, as a failed static_assert; true otherwise.
template <class M, class Backend>
constexpr bool diagnose_pipeline_model() {
    if constexpr (!model_types<M>)
        static_assert(model_types<M>,
                      "weft: this type does not model weft::models::pipeline_model: it needs nested `config` and "
                      "`batch` types (weft::models::model_types); see weft/models/pipeline_model.hpp");
    else if constexpr (!partitioned_model<M, Backend>)
        static_assert(partitioned_model<M, Backend>,
                      "weft: this type does not model weft::models::pipeline_model: it needs stage<Backend> with "
                      "static layout(config, units) and initial_tensors(config, units), num_units(config) and "
                      "validate(config) (weft::models::partitioned_model); see weft/models/pipeline_model.hpp");
    else if constexpr (!runnable_stages<M, Backend>)
        static_assert(runnable_stages<M, Backend>,
                      "weft: this type does not model weft::models::pipeline_model: its stage<Backend> must be "
                      "constructible from (Backend&, config, units, flat_parameters&) and have forward, "
                      "backward_input, backward_weight, a stash with bytes(), is_first/is_last, input_width/"
                      "output_width and tensors() (weft::models::runnable_stages); see weft/models/pipeline_model.hpp");
    else if constexpr (!batched_model<M, Backend>)
        static_assert(batched_model<M, Backend>,
                      "weft: this type does not model weft::models::pipeline_model: it needs batch_rows(batch), "
                      "activation_rows(config, rows) and first_input<Backend>(backend, batch, first, count) "
                      "(weft::models::batched_model); see weft/models/pipeline_model.hpp");
    else if constexpr (!model_loss<M, Backend>)
        static_assert(model_loss<M, Backend>,
                      "weft: this type does not model weft::models::pipeline_model: it needs loss<Backend>(last_stage, "
                      "logits, batch, first, count, scale) giving .loss and .dlogits (weft::models::model_loss); see "
                      "weft/models/pipeline_model.hpp");
    else if constexpr (!tied_model<M>)
        static_assert(tied_model<M>,
                      "weft: this type does not model weft::models::pipeline_model: it needs tied_parameters(config) "
                      "(weft::models::tied_model); see weft/models/pipeline_model.hpp");
    return true;
}
}  // namespace detail

// Instantiate where a model is taken (the engine does): a type that is not a pipeline model
// for this backend stops the build with one message naming what it lacks.
template <class M, class Backend>
struct require_pipeline_model {
    static_assert(detail::diagnose_pipeline_model<M, Backend>());
};

}  // namespace weft::models
