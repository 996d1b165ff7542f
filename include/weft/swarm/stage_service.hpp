// What one SWARM worker computes for its stage of GPT-2, with no transport: stateless calls,
// the gradient contributions they leave, the optimizer step with the stage's averaged
// gradient, and the stage's state as one flat image that peers hand out in chunks.
//
// Stateless calls (Ryabinin et al., SWARM, section 3): a forward call takes a micro-batch's
// input and gives the stage's output, keeping nothing. A backward call takes the same input
// again with the gradient of the output, recomputes the forward and runs backward. So any
// worker of a stage can serve any call, and a call lost with its worker is simply sent to
// another. The last stage's backward call takes the targets instead of an output gradient,
// and gives the loss too.
//
// Exact accounting: a backward's weight gradient is kept apart, keyed by (step, micro-batch),
// until the trainer collects the ones it accepted. A backward the trainer gave up on (it
// timed out and went elsewhere) but that finished anyway is never collected, so every
// micro-batch counts once. Every call names its step: a call from another step is refused
// (call_refused), so a backward always runs against the weights its forward saw.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/token_batches.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/io/safetensors.hpp"
#include "weft/models/gpt.hpp"
#include "weft/models/stage_units.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/partition.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/swarm/state_manifest.hpp"
#include "weft/train/stage_runner.hpp"

namespace weft::swarm {

// A call the worker does not serve, with why: the caller tries elsewhere or resyncs this
// worker; it is not a failure of the run.
class call_refused : public error {
public:
    using error::error;
};

// The stages' unit ranges, cut as the engine cuts them (models::stage_units); a stage count
// the model cannot be cut into is refused naming --stages.
[[nodiscard]] inline std::vector<nn::unit_range> swarm_stage_units(const nn::gpt_config& model, int stages,
                                                                   const std::vector<int>& partition = {}) {
    model.validate();
    require(stages >= 1 && stages <= model.num_units(), "--stages", stages,
            "must be in [1, " + std::to_string(model.num_units()) + "]: each stage holds at least one of the model's " +
                std::to_string(model.num_units()) + " units (the embedding, " + std::to_string(model.num_layers) +
                " blocks and the head)");
    return models::stage_units<models::gpt>(model, stages, partition);
}

// One call's input: token ids for the first stage, activations for the others, of `rows`
// sequences.
struct stage_input {
    int rows = 0;
    std::vector<std::int32_t> tokens;
    std::vector<float> activations;
};

struct backward_result {
    double loss = 0;                // the last stage's mean loss of the micro-batch (0 elsewhere)
    std::vector<float> grad_input;  // empty for the first stage
};

class stage_service {
public:
    using backend_type = exec::cpu;
    using matrix = backend_type::matrix;

    stage_service(const nn::gpt_config& model, int stage, int stages, nn::unit_range units,
                  const optim::optimizer_options& optimizer)
        : model_(model),
          stage_(stage),
          stages_(stages),
          units_(units),
          tensors_(nn::gpt_stage<backend_type>::initial_tensors(model, units)),
          runner_(stage, backend_, model, units, tensors_),
          optimizer_(optimizer) {}

    stage_service(const stage_service&) = delete;
    stage_service& operator=(const stage_service&) = delete;

    [[nodiscard]] int stage() const { return stage_; }
    [[nodiscard]] bool is_first() const { return stage_ == 0; }
    [[nodiscard]] bool is_last() const { return stage_ == stages_ - 1; }
    [[nodiscard]] nn::unit_range units() const { return units_; }
    [[nodiscard]] std::uint64_t step() const { return step_; }
    [[nodiscard]] const weft::parameter_registry& registry() const { return tensors_.registry(); }
    [[nodiscard]] std::span<const float> parameters() const { return tensors_.parameters(); }
    [[nodiscard]] std::size_t kept_contributions() const { return kept_.size(); }

    // The weights of this stage's tensors from a safetensors file of the whole model
    // (train_gpt --save, or an llm.c/Hugging Face GPT-2 export with the same names).
    void load_weights(const io::safetensors_file& file) {
        check_weights(file, registry());
        for (const auto& info : registry().entries())
            std::memcpy(tensors_.parameters().data() + info.offset, file.find(info.name).data.data(),
                        info.size * sizeof(float));
    }
    // Whether `file` holds every tensor of `registry` (a stage's), float32 and of its size: what
    // load_weights needs, and what the trainer checks for every stage before any worker starts.
    static void check_weights(const io::safetensors_file& file, const weft::parameter_registry& registry) {
        for (const auto& info : registry.entries()) {
            const auto& record = file.find(info.name);
            require(record.type == dtype::f32 && static_cast<std::uint64_t>(record.element_count()) == info.size,
                    "--init-from tensor " + info.name, io::detail::shape_text(record.shape),
                    "must be float32 with " + std::to_string(info.size) + " elements (this model's shape)");
        }
    }

    // F: the stage's output for `input` (the last stage's is the logits).
    [[nodiscard]] std::vector<float> forward(std::uint64_t step, const stage_input& input) {
        check_step(step, "forward");
        matrix out = run_forward(0, input);
        runner_.discard(0);
        return {out.data(), out.data() + out.size()};
    }

    // B of micro-batch `microbatch`: the forward again, then backward from `grad_output` (or,
    // on the last stage, from the loss of `targets` times `scale`). The weight gradient is
    // kept as (step, microbatch), replacing one kept before for the same key (a repeated call
    // computes the same gradient).
    [[nodiscard]] backward_result backward(std::uint64_t step, int microbatch, const stage_input& input,
                                           std::span<const float> grad_output, std::span<const std::int32_t> targets,
                                           double scale) {
        check_step(step, "backward");
        matrix out = run_forward(microbatch, input);
        backward_result result;
        matrix dy;
        if (is_last()) {
            require(targets.size() == std::size_t(input.rows) * std::size_t(model_.seq_len), "backward: targets",
                    targets.size(), "must hold rows x seq_len token ids");
            data::token_batch batch{input.rows, model_.seq_len, {}, {targets.begin(), targets.end()}};
            auto loss = runner_.loss(out, batch, 0, input.rows, static_cast<float>(scale));
            result.loss = static_cast<double>(loss.loss);
            dy = std::move(loss.dlogits);
        } else {
            require(grad_output.size() == std::size_t(out.size()), "backward: grad_output", grad_output.size(),
                    "must hold the stage output's " + std::to_string(out.size()) + " values");
            dy = Eigen::Map<const matrix>(grad_output.data(), out.rows(), out.cols());
        }
        tensors_.zero_gradients();
        matrix dx = runner_.backward(microbatch, std::move(dy));
        const auto g = tensors_.gradients();
        kept_[{step, microbatch}] = std::vector<float>(g.begin(), g.end());
        if (!is_first()) result.grad_input.assign(dx.data(), dx.data() + dx.size());
        return result;
    }

    // The sum of the kept contributions of `microbatches` (in increasing order) of `step`;
    // refused if one of them is not kept here.
    [[nodiscard]] std::vector<float> collect(std::uint64_t step, std::vector<std::int32_t> microbatches) const {
        check_step(step, "collect");
        std::sort(microbatches.begin(), microbatches.end());
        require(std::adjacent_find(microbatches.begin(), microbatches.end()) == microbatches.end(),
                "collect: micro-batches", "a repeated one", "must name each micro-batch once");
        std::vector<float> sum(tensors_.parameters().size(), 0.0f);
        for (const int mb : microbatches) {
            const auto it = kept_.find({step, mb});
            if (it == kept_.end())
                throw call_refused("collect: micro-batch " + std::to_string(mb) + " of step " + std::to_string(step) +
                                   " has no contribution kept on this worker of stage " + std::to_string(stage_));
            for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += it->second[i];
        }
        return sum;
    }

    // The optimizer step with the stage's averaged gradient, scaled by `clip` (1: none) as
    // the engine does; then the next step begins and this step's contributions go.
    void apply(std::uint64_t step, double lr, double clip, std::span<const float> gradient) {
        check_step(step, "apply");
        require(gradient.size() == tensors_.parameters().size(), "apply: gradient", gradient.size(),
                "must hold the stage's " + std::to_string(tensors_.parameters().size()) + " parameters");
        optimizer_.set_lr(lr);
        optimizer_.step(tensors_.parameters(), gradient, registry(), 0, clip < 1 ? static_cast<float>(clip) : 1.0f);
        ++step_;
        kept_.clear();
    }

    // ---- the state image, for joining workers ------------------------------------------
    [[nodiscard]] state_manifest manifest() const {
        state_manifest m{step_, tensors_.parameters().size(), {}};
        for (const auto& view : optimizer_.state_views())
            m.optimizer_tensors.emplace_back(std::string(view.name), view.values.size());
        return m;
    }
    // Elements [offset, offset + count) of the image.
    [[nodiscard]] std::vector<float> read_state(std::uint64_t offset, std::uint64_t count) const {
        const state_manifest m = manifest();
        require(count <= m.total() && offset <= m.total() - count, "state chunk",
                "[" + std::to_string(offset) + ", " + std::to_string(offset + count) + ")",
                "must lie within the state's " + std::to_string(m.total()) + " elements");
        std::vector<float> out;
        out.reserve(count);
        visit_image([&](std::span<const float> part, std::uint64_t first) {
            const std::uint64_t lo = std::max(first, offset), hi = std::min(first + part.size(), offset + count);
            if (lo < hi) out.insert(out.end(), part.begin() + (lo - first), part.begin() + (hi - first));
        });
        return out;
    }

    // Restoring from peers: begin with their manifest, write every chunk, then finish. The
    // worker serves no call in between.
    void begin_restore(const state_manifest& m) {
        require(m.parameters == tensors_.parameters().size(), "state manifest parameters", m.parameters,
                "must equal this stage's " + std::to_string(tensors_.parameters().size()) +
                    " (the peer serves another stage or model)");
        restoring_ = optim::optimizer_state<float>{m.step, {}};
        for (const auto& [name, count] : m.optimizer_tensors)
            restoring_.tensors.push_back({name, state_vector<float>(count)});
    }
    void write_state(std::uint64_t offset, std::span<const float> values) {
        std::uint64_t first = 0;
        const auto put = [&](std::span<float> part) {
            const std::uint64_t lo = std::max(first, offset),
                                hi = std::min(first + part.size(), offset + values.size());
            if (lo < hi)
                std::copy(values.begin() + (lo - offset), values.begin() + (hi - offset), part.begin() + (lo - first));
            first += part.size();
        };
        put(tensors_.parameters());
        for (auto& t : restoring_.tensors) put(t.values);
        require(offset + values.size() <= first, "state chunk end", offset + values.size(),
                "must lie within the manifest's " + std::to_string(first) + " elements");
    }
    void finish_restore() {
        // The optimizer's own count of steps is the image's; AdamW's bias correction uses it.
        step_ = restoring_.steps;
        optimizer_.import_state(std::move(restoring_));
        restoring_ = {};
        kept_.clear();
    }

private:
    void check_step(std::uint64_t step, const char* call) const {
        if (step != step_)
            throw call_refused(std::string(call) + " of step " + std::to_string(step) +
                               " refused: this worker of stage " + std::to_string(stage_) +
                               " holds the weights of step " + std::to_string(step_) +
                               (step < step_ ? " (the call is from an older step)" : " (this worker is behind)"));
    }
    // One call at a time: whatever a failed call left in the stash goes first.
    matrix run_forward(int microbatch, const stage_input& input) {
        runner_.clear();
        if (is_first()) {
            require(input.tokens.size() == std::size_t(input.rows) * std::size_t(model_.seq_len), "input tokens",
                    input.tokens.size(), "must hold rows x seq_len token ids");
            data::token_batch batch{input.rows, model_.seq_len, input.tokens, {}};
            return runner_.forward(microbatch, batch, 0, input.rows);
        }
        const auto rows = static_cast<Eigen::Index>(input.rows) * model_.seq_len;
        require(input.activations.size() == std::size_t(rows) * std::size_t(model_.d_model), "input activations",
                input.activations.size(), "must hold rows x seq_len x d_model values");
        const matrix x = Eigen::Map<const matrix>(input.activations.data(), rows, model_.d_model);
        return runner_.forward(microbatch, x);
    }
    template <class Visit>
    void visit_image(Visit&& visit) const {
        std::uint64_t first = 0;
        visit(tensors_.parameters(), first);
        first += tensors_.parameters().size();
        for (const auto& view : optimizer_.state_views()) {
            visit(view.values, first);
            first += view.values.size();
        }
    }

    nn::gpt_config model_;
    int stage_;
    int stages_;
    nn::unit_range units_;
    backend_type backend_;
    nn::flat_parameters<float> tensors_;
    train::stage_runner<models::gpt, backend_type> runner_;
    optim::any_optimizer<float> optimizer_;
    std::uint64_t step_ = 0;
    std::map<std::pair<std::uint64_t, int>, std::vector<float>> kept_;
    optim::optimizer_state<float> restoring_;  // the image being fetched (its steps: the step)
};

}  // namespace weft::swarm
