// One pipeline stage ready to compute: the model's stage over tensors it borrows (from the
// training state) on a backend object, and the activations its forwards keep for their
// backwards, keyed by micro-batch. F, B, I and W are calls that need no schedule: the program
// loop makes them in a lowered program's order, and a SWARM worker can serve one call at a
// time with the same runner. Each goes to the backend as one action (exec::run_action), which
// a backend may record and replay (exec::cuda's CUDA graphs).
#pragma once

#include <cstddef>
#include <utility>

#include "weft/exec/action_key.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/tensor_parallel.hpp"
#include "weft/train/activation_stash.hpp"

namespace weft::train {

template <class Model, compute_backend Backend>
class stage_runner {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;
    using model_config = typename Model::config;
    using batch_type = typename Model::batch;
    using stage_type = typename Model::template stage<Backend>;
    using stash_type = typename stage_type::stash;
    using loss_type = decltype(Model::template loss<Backend>(std::declval<const stage_type&>(),
                                                             std::declval<const matrix&>(),
                                                             std::declval<const batch_type&>(), 0, 0, scalar{}));

    // Stage `index` over `units`, computing with `tensors` (which must outlive the runner) on
    // `backend`. The tensor-parallel form takes the group the stage's slices reduce over.
    // A backend that records actions (exec::run_action) forgets what it recorded of this
    // stage: a new runner is a new layout's or a restart's, whose buffers may have moved.
    stage_runner(int index, Backend& backend, const model_config& model, nn::unit_range units,
                 nn::flat_parameters<scalar>& tensors)
        : index_(index), stage_(backend, model, units, tensors), stash_(index) {
        exec::forget_actions(backend, index);
    }
    stage_runner(int index, Backend& backend, const model_config& model, nn::unit_range units,
                 nn::flat_parameters<scalar>& tensors, nn::tp_group<scalar> tp)
        : index_(index), stage_(backend, model, units, tensors, std::move(tp)), stash_(index) {
        exec::forget_actions(backend, index);
    }

    [[nodiscard]] int index() const { return index_; }
    [[nodiscard]] const stage_type& stage() const { return stage_; }
    [[nodiscard]] bool is_first() const { return stage_.is_first(); }
    [[nodiscard]] bool is_last() const { return stage_.is_last(); }

    // F of the first stage: batch rows [first_row, first_row + rows) enter the model.
    [[nodiscard]] matrix forward(int microbatch, const batch_type& batch, int first_row, int rows) {
        auto& saved = stash_.insert(microbatch, stash_type{});
        return exec::run_action(backend(), key(exec::action_part::forward, microbatch, rows), [&] {
            return stage_.forward(Model::template first_input<Backend>(stage_.backend(), batch, first_row, rows),
                                  saved);
        });
    }
    // F of a later stage: the previous stage's output for this micro-batch.
    [[nodiscard]] matrix forward(int microbatch, const matrix& input) {
        auto& saved = stash_.insert(microbatch, stash_type{});
        return exec::run_action(backend(), key(exec::action_part::forward, microbatch, input.rows()), input,
                                [&](const matrix& staged) { return stage_.forward(staged, saved); });
    }

    // The last stage's mean loss over batch rows [first_row, first_row + rows) and its
    // gradient with respect to `output`, times `scale` (1 / micro-batches for a step's mean).
    [[nodiscard]] loss_type loss(const matrix& output, const batch_type& batch, int first_row, int rows,
                                 scalar scale) const {
        return Model::template loss<Backend>(stage_, output, batch, first_row, rows, scale);
    }

    // I: the gradient of the stage's input from that of its output; empty for the first stage
    // (token ids or raw inputs need none). The micro-batch's activations stay for W.
    [[nodiscard]] matrix backward_input(int microbatch, matrix grad_output) {
        auto& saved = stash_.at(microbatch);
        const int rows = grad_output.rows();
        return exec::run_action(backend(), key(exec::action_part::backward_input, microbatch, rows),
                                std::move(grad_output),
                                [&](matrix staged) { return stage_.backward_input(std::move(staged), saved); });
    }
    // W: adds the micro-batch's weight gradients to the tensors' gradient buffer and frees
    // its activations.
    void backward_weight(int microbatch) {
        auto& saved = stash_.at(microbatch);
        // The rows of W's key: the stash's, which only F knew; the micro-batch names them.
        exec::run_action(backend(), key(exec::action_part::backward_weight, microbatch, 0), [&] {
            stage_.backward_weight(saved);
            stash_.erase(microbatch);
        });
    }
    // B: I then W, as one action.
    [[nodiscard]] matrix backward(int microbatch, matrix grad_output) {
        auto& saved = stash_.at(microbatch);
        const int rows = grad_output.rows();
        return exec::run_action(backend(), key(exec::action_part::backward, microbatch, rows), std::move(grad_output),
                                [&](matrix staged) {
                                    matrix grad_input = stage_.backward_input(std::move(staged), saved);
                                    stage_.backward_weight(saved);
                                    stash_.erase(microbatch);
                                    return grad_input;
                                });
    }

    // Micro-batches whose activations are held, and their bytes.
    [[nodiscard]] std::size_t stashed() const { return stash_.live(); }
    [[nodiscard]] std::size_t stashed_bytes() const { return stash_.bytes(); }
    // Drops every held activation (a step that failed half-way must not leak into the next).
    void clear() { stash_.clear(); }
    // Drops one micro-batch's activations: a forward-only pass (evaluation) needs no backward.
    void discard(int microbatch) { stash_.erase(microbatch); }
    // The backend the stage runs on (the program loop times its actions there).
    [[nodiscard]] Backend& backend() const { return stage_.backend(); }

private:
    [[nodiscard]] exec::action_key key(exec::action_part part, int microbatch, int rows) const {
        return {.stage = index_, .part = part, .microbatch = microbatch, .rows = rows};
    }

    int index_;
    stage_type stage_;
    activation_stash<stash_type> stash_;
};

}  // namespace weft::train
