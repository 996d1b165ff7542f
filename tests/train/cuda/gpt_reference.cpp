// The CPU GPT-2 reference for the CUDA gpt_trainer tests: the textbook loop over one
// nn::gpt_stage holding the whole model, as tests/train's plain loop runs the MLP.
#include "gpt_reference.hpp"

#include <optional>
#include <span>

#include "weft/exec/cpu.hpp"
#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/nn/token_view.hpp"
#include "weft/optim/adamw.hpp"

namespace weft_test {

using backend = weft::exec::cpu;

struct gpt_reference::impl {
    explicit impl(const weft::nn::gpt_config& config) : stage(cpu, config, {0, config.num_units()}) {}
    backend cpu;  // before the stage, which computes on it
    weft::nn::gpt_stage<backend> stage;
    std::optional<weft::optim::adamw> optimizer;
};

gpt_reference::gpt_reference(const weft::nn::gpt_config& config) : impl_(std::make_unique<impl>(config)) {}
gpt_reference::~gpt_reference() = default;

const weft::nn::parameter_registry& gpt_reference::registry() const {
    return impl_->stage.registry();
}

std::vector<float> gpt_reference::parameters() const {
    const auto p = impl_->stage.parameters();
    return {p.begin(), p.end()};
}

std::vector<float> gpt_reference::gradients() const {
    const auto g = impl_->stage.gradients();
    return {g.begin(), g.end()};
}

float gpt_reference::forward_backward(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets,
                                      int sequences) {
    auto& stage = impl_->stage;
    stage.zero_gradients();
    weft::nn::gpt_stage<backend>::stash stash;
    const weft::nn::token_view tokens{inputs, sequences, stage.config().seq_len};
    const backend::matrix logits = stage.forward(tokens, stash);
    const auto loss = weft::nn::cross_entropy(impl_->cpu, logits, targets, 1.0f);
    static_cast<void>(stage.backward(loss.dlogits, stash));  // the first stage's input gradient is empty
    return loss.loss;
}

float gpt_reference::adamw_step(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets,
                                int sequences, double lr, double beta1, double beta2, double eps, double weight_decay) {
    const float loss = forward_backward(inputs, targets, sequences);
    if (!impl_->optimizer)
        impl_->optimizer.emplace(weft::optim::adamw_options{
            .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay});
    auto& stage = impl_->stage;
    impl_->optimizer->step(stage.parameters(), stage.gradients(), stage.registry());
    return loss;
}

}  // namespace weft_test
