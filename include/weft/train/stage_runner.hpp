// One pipeline stage ready to compute: the model's stage over tensors it borrows (from the
// training state) on a backend object, and the activations its forwards keep for their
// backwards, keyed by micro-batch. F, B, I and W are calls that need no schedule: the program
// loop makes them in a lowered program's order, and a SWARM worker can serve one call at a
// time with the same runner. Each goes to the backend as one action (exec::run_action), which
// a backend may record and replay (exec::cuda's CUDA graphs).
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>

#include "weft/exec/action_key.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/tensor_parallel.hpp"
#include "weft/train/activation_stash.hpp"
#include "weft/train/recompute.hpp"

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
    // `recompute`: what the stage keeps from a forward to its backward (train/recompute.hpp).
    stage_runner(int index, Backend& backend, const model_config& model, nn::unit_range units,
                 nn::flat_parameters<scalar>& tensors, recompute_mode recompute = recompute_mode::none)
        : index_(index), stage_(backend, model, units, tensors), tensors_(&tensors), recompute_(recompute),
          stash_(index), kept_(index) {
        check_recompute_mode();
        exec::forget_actions(backend, index);
    }
    stage_runner(int index, Backend& backend, const model_config& model, nn::unit_range units,
                 nn::flat_parameters<scalar>& tensors, nn::tp_group<scalar> tp,
                 recompute_mode recompute = recompute_mode::none)
        : index_(index), stage_(backend, model, units, tensors, std::move(tp)), tensors_(&tensors),
          recompute_(recompute), stash_(index), kept_(index) {
        check_recompute_mode();
        exec::forget_actions(backend, index);
    }

    [[nodiscard]] int index() const { return index_; }
    [[nodiscard]] const stage_type& stage() const { return stage_; }
    [[nodiscard]] bool is_first() const { return stage_.is_first(); }
    [[nodiscard]] bool is_last() const { return stage_.is_last(); }
    [[nodiscard]] recompute_mode recompute() const { return recompute_; }

    // F of the first stage: batch rows [first_row, first_row + rows) enter the model.
    [[nodiscard]] matrix forward(int microbatch, const batch_type& batch, int first_row, int rows) {
        if (recompute_ == recompute_mode::full) {
            // The batch outlives the step: the backward reads its rows again.
            kept_.insert(microbatch, kept_input{matrix(), &batch, first_row, rows});
            stash_type scratch;
            return exec::run_action(backend(), key(exec::action_part::forward, microbatch, rows),
                                    [&] { return first_forward(batch, first_row, rows, scratch); });
        }
        auto& saved = stash_.insert(microbatch, stash_type{});
        return exec::run_action(backend(), key(exec::action_part::forward, microbatch, rows), [&] {
            matrix output = first_forward(batch, first_row, rows, saved);
            drop_recomputable(saved);
            return output;
        });
    }
    // F of a later stage: the previous stage's output for this micro-batch.
    [[nodiscard]] matrix forward(int microbatch, const matrix& input) {
        if (recompute_ == recompute_mode::full) {
            kept_.insert(microbatch, kept_input{input, nullptr, 0, static_cast<int>(input.rows())});
            stash_type scratch;
            return exec::run_action(backend(), key(exec::action_part::forward, microbatch, input.rows()), input,
                                    [&](const matrix& staged) { return stage_.forward(staged, scratch); });
        }
        auto& saved = stash_.insert(microbatch, stash_type{});
        return exec::run_action(backend(), key(exec::action_part::forward, microbatch, input.rows()), input,
                                [&](const matrix& staged) {
                                    matrix output = stage_.forward(staged, saved);
                                    drop_recomputable(saved);
                                    return output;
                                });
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
        auto& saved = saved_for_backward(microbatch);
        const int rows = grad_output.rows();
        return exec::run_action(backend(), key(exec::action_part::backward_input, microbatch, rows),
                                std::move(grad_output),
                                [&](matrix staged) { return stage_.backward_input(std::move(staged), saved); });
    }
    // W: adds the micro-batch's weight gradients to the tensors' gradient buffer and frees
    // its activations. `on_final(nn::gradient_range)` hears of each layer's range as the
    // stage finishes it (nn/final_gradients.hpp); a stage that does not say gives the whole
    // buffer at the end.
    template <class OnFinal = nn::ignore_final_gradients>
    void backward_weight(int microbatch, OnFinal&& on_final = {}) {
        auto& saved = stash_.at(microbatch);
        // The rows of W's key: the stash's, which only F knew; the micro-batch names them.
        exec::run_action(backend(), key(exec::action_part::backward_weight, microbatch, 0), [&] {
            if constexpr (requires { stage_.backward_weight(saved, on_final); }) {
                stage_.backward_weight(saved, on_final);
            } else {
                stage_.backward_weight(saved);
                on_final(whole_buffer());
            }
            stash_.erase(microbatch);
        });
    }
    // B: I then W, as one action (the stage may interleave them layer by layer); `on_final`
    // as backward_weight's.
    template <class OnFinal = nn::ignore_final_gradients>
    [[nodiscard]] matrix backward(int microbatch, matrix grad_output, OnFinal&& on_final = {}) {
        auto& saved = saved_for_backward(microbatch);
        const int rows = grad_output.rows();
        return exec::run_action(backend(), key(exec::action_part::backward, microbatch, rows), std::move(grad_output),
                                [&](matrix staged) {
                                    matrix grad_input;
                                    if constexpr (requires { stage_.backward(std::move(staged), saved, on_final); }) {
                                        grad_input = stage_.backward(std::move(staged), saved, on_final);
                                    } else {
                                        grad_input = stage_.backward_input(std::move(staged), saved);
                                        stage_.backward_weight(saved);
                                        on_final(whole_buffer());
                                    }
                                    stash_.erase(microbatch);
                                    return grad_input;
                                });
    }

    // Micro-batches whose activations are held (or, under full recompute, their inputs), and
    // their bytes.
    [[nodiscard]] std::size_t stashed() const { return stash_.live() + kept_.live(); }
    [[nodiscard]] std::size_t stashed_bytes() const { return stash_.bytes() + kept_.bytes(); }
    // The most stashed_bytes() reached inside a backward since the last call: a full
    // recompute's rebuilt activations, which the backward frees (B) or trims (I) before it
    // returns, so that no sample between actions sees them.
    [[nodiscard]] std::size_t take_peak_inside_backward() { return std::exchange(peak_inside_backward_, 0); }
    // Drops every held activation (a step that failed half-way must not leak into the next).
    void clear() {
        stash_.clear();
        kept_.clear();
    }
    // Drops one micro-batch's activations: a forward-only pass (evaluation) needs no backward.
    void discard(int microbatch) {
        if (kept_.contains(microbatch))
            kept_.erase(microbatch);
        else
            stash_.erase(microbatch);
    }
    // The backend the stage runs on (the program loop times its actions there).
    [[nodiscard]] Backend& backend() const { return stage_.backend(); }

private:
    // What a full-recompute stage keeps of a micro-batch from its forward to its backward.
    struct kept_input {
        matrix input;                       // a later stage's input (empty on the first stage)
        const batch_type* batch = nullptr;  // the first stage's: it reads these rows again
        int first_row = 0;
        int rows = 0;
        [[nodiscard]] std::size_t bytes() const {
            return static_cast<std::size_t>(input.size()) * sizeof(typename matrix::value_type);
        }
    };

    void check_recompute_mode() const {
        if constexpr (exec::records_actions<Backend>)
            require(recompute_ == recompute_mode::none, "recompute", to_string(recompute_),
                    "needs a backend that runs each action as it is called; this one records actions and replays "
                    "them (CUDA graphs), which would replay a forward into buffers the backward no longer holds; "
                    "valid here: none");
        if constexpr (!selective_recompute<stage_type>)
            require(recompute_ != recompute_mode::selective, "recompute", to_string(recompute_),
                    "this model's stages have nothing to recompute selectively (no drop_recomputable); valid: none "
                    "or full");
    }

    matrix first_forward(const batch_type& batch, int first_row, int rows, stash_type& saved) {
        return stage_.forward(Model::template first_input<Backend>(stage_.backend(), batch, first_row, rows), saved);
    }

    void drop_recomputable(stash_type& saved) const {
        if constexpr (selective_recompute<stage_type>)
            if (recompute_ == recompute_mode::selective) stage_.drop_recomputable(saved);
    }

    // The micro-batch's activations for its backward: under full recompute the forward runs
    // again from the kept input (part of the backward's action and time).
    stash_type& saved_for_backward(int microbatch) {
        if (recompute_ != recompute_mode::full || stash_.contains(microbatch)) return stash_.at(microbatch);
        kept_input kept = std::move(kept_.at(microbatch));
        kept_.erase(microbatch);
        auto& saved = stash_.insert(microbatch, stash_type{});
        if (kept.batch != nullptr)
            static_cast<void>(first_forward(*kept.batch, kept.first_row, kept.rows, saved));
        else
            static_cast<void>(stage_.forward(kept.input, saved));
        peak_inside_backward_ = std::max(peak_inside_backward_, stashed_bytes());
        return saved;
    }

    [[nodiscard]] nn::gradient_range whole_buffer() const { return {0, tensors_->gradients().size()}; }

    [[nodiscard]] exec::action_key key(exec::action_part part, int microbatch, int rows) const {
        return {.stage = index_, .part = part, .microbatch = microbatch, .rows = rows};
    }

    int index_;
    stage_type stage_;
    nn::flat_parameters<scalar>* tensors_;  // the stage's, which the runner's owner keeps
    recompute_mode recompute_;
    activation_stash<stash_type> stash_;
    activation_stash<kept_input> kept_;  // full recompute: the inputs of the micro-batches in flight
    std::size_t peak_inside_backward_ = 0;
};

}  // namespace weft::train
