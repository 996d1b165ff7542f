// One pipeline stage of the MLP model: the units [first, last) computing on a backend object
// with their parameters and gradients in flat buffers (nn::flat_parameters, owned or
// borrowed as gpt_stage explains), forward, and backward split into an input half (I, on
// the critical path) and a weight half (W, schedulable into bubbles).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/nn/layer_residency.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/nn/gelu.hpp"
#include "weft/nn/layer_norm.hpp"
#include "weft/nn/linear.hpp"
#include "weft/nn/mlp_config.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/stage_checks.hpp"

namespace weft::nn {

template <compute_backend Backend>
class mlp_stage {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    // Everything backward needs for one micro-batch. Filled by forward, trimmed by
    // backward_input to what backward_weight needs, emptied by backward_weight.
    struct stash {
        enum class phase { empty, forwarded, input_done };
        struct unit_saved {
            matrix x;                  // unit input
            matrix mean, rstd;         // layer-norm statistics
            matrix normed;             // layer-norm output = input of the next linear
            matrix pre_act, act;       // fc1 output and its GELU (blocks)
            matrix d_out;              // gradient of the unit's output
            matrix d_pre_act;          // gradient of fc1's output (blocks)
            matrix d_normed;           // gradient of the layer-norm output
        };
        phase state = phase::empty;
        int rows = 0;
        std::vector<unit_saved> units;

        [[nodiscard]] bool empty() const { return state == phase::empty; }
        // Bytes of activations held; what the schedules' peak-memory figures count.
        [[nodiscard]] std::size_t bytes() const {
            std::size_t n = 0;
            for (const auto& u : units)
                for (const matrix* m : {&u.x, &u.mean, &u.rstd, &u.normed, &u.pre_act, &u.act,
                                        &u.d_out, &u.d_pre_act, &u.d_normed})
                    n += std::size_t(m->size()) * sizeof(typename matrix::value_type);
            return n;
        }
    };

    // Owns its tensors, drawn from config.seed. `backend` must outlive the stage.
    mlp_stage(Backend& backend, const mlp_config& config, unit_range units)
        : mlp_stage(backend, config, units, std::make_unique<flat_parameters<scalar>>(initial_tensors(config, units)),
                    nullptr) {}

    // Computes with `tensors`, which it does not own (they must outlive the stage); their
    // registry must be this stage's layout. Nothing is drawn or overwritten.
    mlp_stage(Backend& backend, const mlp_config& config, unit_range units, flat_parameters<scalar>& tensors)
        : mlp_stage(backend, config, units, nullptr, &tensors) {}

    // Every parameter read is inside a layers_in_use scope (nn/layer_residency.hpp).
    static constexpr bool names_layer_reads = true;

    mlp_stage(const mlp_stage&) = delete;
    mlp_stage& operator=(const mlp_stage&) = delete;
    mlp_stage(mlp_stage&&) noexcept = default;
    mlp_stage& operator=(mlp_stage&&) noexcept = default;
    ~mlp_stage() = default;

    // The registry (names, shapes, flat offsets) a stage over `units` has, without drawing
    // its weights; built by the constructor's own code.
    [[nodiscard]] static parameter_registry layout(const mlp_config& config, unit_range units) {
        parameter_registry registry;
        static_cast<void>(build_units(registry, config, units));
        return registry;
    }

    // The tensors a stage over `units` starts training from: the layout, with weights
    // drawn from config.seed and zero gradients.
    [[nodiscard]] static flat_parameters<scalar> initial_tensors(const mlp_config& config, unit_range units) {
        parameter_registry registry;
        const std::vector<unit> layers = build_units(registry, config, units);
        flat_parameters<scalar> tensors(std::move(registry));
        for (const unit& layer : layers) {
            if (layer.kind != unit_kind::input) layer.ln.initialize(tensors.parameters());
            layer.fc1.initialize(tensors.parameters(), config.seed);
            if (layer.kind == unit_kind::block) layer.fc2.initialize(tensors.parameters(), config.seed);
        }
        return tensors;
    }

    [[nodiscard]] Backend& backend() const { return *backend_; }
    [[nodiscard]] const mlp_config& config() const { return config_; }
    [[nodiscard]] unit_range units() const { return units_; }
    [[nodiscard]] bool is_first() const { return units_.first == 0; }
    [[nodiscard]] bool is_last() const { return units_.last == config_.num_units(); }
    [[nodiscard]] int input_width() const { return is_first() ? config_.input_dim : config_.hidden_dim; }
    [[nodiscard]] int output_width() const { return is_last() ? config_.num_classes : config_.hidden_dim; }

    // Returns the stage output (the logits for the last stage) and fills `s`,
    // which must be empty (a fresh stash or one released by backward_weight).
    [[nodiscard]] matrix forward(const matrix& x, stash& s) const {
        check_stash_empty(s);
        require(backend_->rows(x) >= 1, "forward: x.rows()", backend_->rows(x), "must be at least 1");
        require(backend_->cols(x) == input_width(), "forward: x.cols()", backend_->cols(x),
                "must equal the stage input width " + std::to_string(input_width()));
        s.units.assign(units_list_.size(), {});
        s.rows = backend_->rows(x);
        const auto p = parameters();
        matrix y = x;
        for (std::size_t i = 0; i < units_list_.size(); ++i) {
            const unit& layer = units_list_[i];
            auto& saved = s.units[i];
            // The unit's parameters are present for this iteration (nn/layer_residency.hpp).
            const layers_in_use<flat_parameters<scalar>> in_use(*tensors_, reads(i), reads(i + 1));
            saved.x = std::move(y);
            switch (layer.kind) {
                case unit_kind::input:
                    y = layer.fc1.forward(*backend_, p, saved.x);
                    break;
                case unit_kind::block:
                    saved.normed = layer.ln.forward(*backend_, p, saved.x, saved.mean, saved.rstd);
                    saved.pre_act = layer.fc1.forward(*backend_, p, saved.normed);
                    saved.act = gelu<Backend>::forward(*backend_, saved.pre_act);
                    y = backend_->add(saved.x, layer.fc2.forward(*backend_, p, saved.act));
                    break;
                case unit_kind::head:
                    saved.normed = layer.ln.forward(*backend_, p, saved.x, saved.mean, saved.rstd);
                    y = layer.fc1.forward(*backend_, p, saved.normed);
                    break;
            }
        }
        s.state = stash::phase::forwarded;
        return y;
    }

    // dy is the gradient of the stage output (last stage: dlogits from cross_entropy), taken
    // by value: it becomes the first layer's saved gradient, so pass an rvalue to avoid a copy.
    // Returns the gradient of the stage input; the first stage returns an empty
    // (0 x 0) matrix, since nothing upstream needs it and computing it costs a GEMM.
    [[nodiscard]] matrix backward_input(matrix dy, stash& s) const {
        check_backward_input(dy, s);
        const auto p = parameters();
        matrix d = std::move(dy);
        for (std::size_t i = units_list_.size(); i-- > 0;) d = reading_unit_backward_input(i, p, std::move(d), s);
        s.state = stash::phase::input_done;
        return d;
    }

    // Accumulates (+=) this micro-batch's weight gradients into gradients() and
    // releases `s` so it can take the next forward. `on_final(range)` is called for each
    // unit's gradient range once it is added (nn/final_gradients.hpp).
    template <class OnFinal = ignore_final_gradients>
    void backward_weight(stash& s, OnFinal&& on_final = {}) {
        require(s.state == stash::phase::input_done, "backward_weight: stash",
                s.empty() ? "empty" : "not past backward_input",
                "must have run backward_input for this micro-batch first");
        const auto g = gradients();
        for (std::size_t i = 0; i < units_list_.size(); ++i) {
            unit_backward_weight(i, g, s);
            on_final(units_list_[i].grads);
        }
        s = stash{};
    }

    // The full backward (B), unit by unit from the last: each unit's input half, then its
    // weight half, so that a unit's gradients are final while the units before it still
    // compute (on the step's last micro-batch their reduction overlaps the rest of the
    // backward). The units' tensors are disjoint, so every element is computed as by
    // backward_input then backward_weight. `on_final` as backward_weight's.
    template <class OnFinal = ignore_final_gradients>
    [[nodiscard]] matrix backward(matrix dy, stash& s, OnFinal&& on_final = {}) {
        check_backward_input(dy, s);
        const auto p = parameters();
        const auto g = gradients();
        matrix d = std::move(dy);
        for (std::size_t i = units_list_.size(); i-- > 0;) {
            d = reading_unit_backward_input(i, p, std::move(d), s);
            unit_backward_weight(i, g, s);
            on_final(units_list_[i].grads);
        }
        s = stash{};
        return d;
    }

    // Selective recompute (train/recompute.hpp): drops the blocks' GELU outputs, which the
    // backward computes again from their inputs.
    void drop_recomputable(stash& s) const {
        for (std::size_t i = 0; i < units_list_.size(); ++i)
            if (units_list_[i].kind == unit_kind::block) s.units[i].act = matrix();
    }

    // The tensors the stage computes with (owned or borrowed).
    [[nodiscard]] flat_parameters<scalar>& tensors() { return *tensors_; }
    [[nodiscard]] const flat_parameters<scalar>& tensors() const { return *tensors_; }
    [[nodiscard]] std::span<scalar> parameters() { return tensors_->parameters(); }
    [[nodiscard]] std::span<const scalar> parameters() const { return tensors_->parameters(); }
    [[nodiscard]] std::span<scalar> gradients() { return tensors_->gradients(); }
    [[nodiscard]] std::span<const scalar> gradients() const { return tensors_->gradients(); }
    void zero_gradients() { tensors_->zero_gradients(); }
    [[nodiscard]] const parameter_registry& registry() const { return tensors_->registry(); }

private:
    enum class unit_kind { input, block, head };
    struct unit {
        unit_kind kind = unit_kind::input;
        layer_norm<Backend> ln;   // blocks and head
        linear<Backend> fc1;      // input: input; blocks: fc1; head: head.fc
        linear<Backend> fc2;      // blocks
        gradient_range grads;     // its tensors' range of the flat buffers
    };

    void check_backward_input(const matrix& dy, const stash& s) const {
        nn::check_backward_input(s, backend_->rows(dy), backend_->cols(dy), output_width());
    }

    // Unit i's input half: takes the gradient of its output, keeps what its weight half needs,
    // returns the gradient of its input (empty for the input unit).
    // What unit i reads (its tensors' range; none past the last unit), and its backward_input
    // with them present, naming the unit the backward reads next (nn/layer_residency.hpp).
    [[nodiscard]] std::span<const gradient_range> reads(std::size_t i) const {
        if (i >= units_list_.size()) return {};
        return std::span<const gradient_range>(&units_list_[i].grads, 1);
    }
    matrix reading_unit_backward_input(std::size_t i, std::span<const scalar> p, matrix d, stash& s) const {
        const layers_in_use<flat_parameters<scalar>> in_use(*tensors_, reads(i),
                                                            i > 0 ? reads(i - 1) : std::span<const gradient_range>());
        return unit_backward_input(i, p, std::move(d), s);
    }
    matrix unit_backward_input(std::size_t i, std::span<const scalar> p, matrix d, stash& s) const {
        const unit& layer = units_list_[i];
        auto& saved = s.units[i];
        saved.d_out = std::move(d);
        switch (layer.kind) {
            case unit_kind::input:
                return matrix();
            case unit_kind::block: {
                // Dropped by selective recompute: W needs it; the same kernel, the same bits.
                if (saved.act.size() == 0) saved.act = gelu<Backend>::forward(*backend_, saved.pre_act);
                const matrix d_act = layer.fc2.backward_input(*backend_, p, saved.d_out);
                saved.d_pre_act = gelu<Backend>::backward_input(*backend_, saved.pre_act, d_act);
                saved.pre_act = matrix();  // backward_weight needs act, not pre_act
                saved.d_normed = layer.fc1.backward_input(*backend_, p, saved.d_pre_act);
                return backend_->add(saved.d_out, layer.ln.backward_input(*backend_, p, saved.x, saved.mean,
                                                                         saved.rstd, saved.d_normed));
            }
            case unit_kind::head:
                saved.d_normed = layer.fc1.backward_input(*backend_, p, saved.d_out);
                return layer.ln.backward_input(*backend_, p, saved.x, saved.mean, saved.rstd, saved.d_normed);
        }
        return matrix();
    }

    // Unit i's weight half: adds its gradients.
    void unit_backward_weight(std::size_t i, std::span<scalar> g, const stash& s) const {
        const unit& layer = units_list_[i];
        const auto& saved = s.units[i];
        switch (layer.kind) {
            case unit_kind::input:
                layer.fc1.backward_weight(*backend_, g, saved.x, saved.d_out);
                break;
            case unit_kind::block:
                layer.fc2.backward_weight(*backend_, g, saved.act, saved.d_out);
                layer.fc1.backward_weight(*backend_, g, saved.normed, saved.d_pre_act);
                layer.ln.backward_weight(*backend_, g, saved.x, saved.mean, saved.rstd, saved.d_normed);
                break;
            case unit_kind::head:
                layer.fc1.backward_weight(*backend_, g, saved.normed, saved.d_out);
                layer.ln.backward_weight(*backend_, g, saved.x, saved.mean, saved.rstd, saved.d_normed);
                break;
        }
    }

    // Registers the layers of `units` in order and returns them.
    static std::vector<unit> build_units(parameter_registry& registry, const mlp_config& config, unit_range units) {
        config.validate();
        require(units.first >= 0 && units.first < units.last && units.last <= config.num_units(),
                "unit_range", "[" + std::to_string(units.first) + ", " + std::to_string(units.last) + ")",
                "must be a non-empty range within [0, num_units = " +
                    std::to_string(config.num_units()) + ")");
        const int hidden = config.hidden_dim;
        const int wide = config.expansion * hidden;
        std::vector<unit> out;
        for (int u = units.first; u < units.last; ++u) {
            unit layer;
            layer.grads.first = registry.total_size();
            if (u == 0) {
                layer.kind = unit_kind::input;
                layer.fc1 = linear<Backend>(registry, "input", config.input_dim, hidden);
            } else if (u == config.num_blocks + 1) {
                layer.kind = unit_kind::head;
                layer.ln = layer_norm<Backend>(registry, "head.ln", hidden);
                layer.fc1 = linear<Backend>(registry, "head.fc", hidden, config.num_classes);
            } else {
                const std::string prefix = "blocks." + std::to_string(u - 1);
                layer.kind = unit_kind::block;
                layer.ln = layer_norm<Backend>(registry, prefix + ".ln", hidden);
                layer.fc1 = linear<Backend>(registry, prefix + ".fc1", hidden, wide);
                layer.fc2 = linear<Backend>(registry, prefix + ".fc2", wide, hidden);
            }
            layer.grads.last = registry.total_size();
            out.push_back(std::move(layer));
        }
        return out;
    }

    mlp_stage(Backend& backend, const mlp_config& config, unit_range units,
              std::unique_ptr<flat_parameters<scalar>> owned, flat_parameters<scalar>* borrowed)
        : backend_(&backend),
          config_(config),
          units_(units),
          owned_(std::move(owned)),
          tensors_(owned_ ? owned_.get() : borrowed) {
        parameter_registry registry;
        units_list_ = build_units(registry, config, units);
        require(registry == tensors_->registry(), "mlp_stage tensors", "a different layout",
                "must have this stage's registry (units [" + std::to_string(units.first) + ", " +
                    std::to_string(units.last) + ")): build them with mlp_stage::initial_tensors or ::layout");
    }

    Backend* backend_;
    mlp_config config_;
    unit_range units_;
    std::unique_ptr<flat_parameters<scalar>> owned_;  // null when the tensors are borrowed
    flat_parameters<scalar>* tensors_;
    std::vector<unit> units_list_;
};

}  // namespace weft::nn
