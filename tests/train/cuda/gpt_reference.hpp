// weft's CPU GPT-2 (nn::gpt_stage<exec::cpu> over every unit) and its AdamW as the
// reference for the CUDA gpt_trainer tests, behind an interface free of Eigen: it is
// compiled by the host compiler, and the nvcc-compiled test only sees this header.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/nn/gpt_config.hpp"
#include "weft/nn/parameter_registry.hpp"

namespace weft_test {

class gpt_reference {
public:
    explicit gpt_reference(const weft::nn::gpt_config& config);
    gpt_reference(const gpt_reference&) = delete;
    gpt_reference& operator=(const gpt_reference&) = delete;
    ~gpt_reference();

    [[nodiscard]] const weft::nn::parameter_registry& registry() const;
    [[nodiscard]] std::vector<float> parameters() const;
    [[nodiscard]] std::vector<float> gradients() const;

    // Zeroes the gradients, then forward, mean cross-entropy and the full backward over
    // `sequences` rows of seq_len tokens (row-major); returns the loss.
    float forward_backward(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets,
                           int sequences);
    // forward_backward, then one weft::optim::adamw step with these hyperparameters (the
    // optimizer is created by the first call; later calls must pass the same values).
    // Returns the loss before the update.
    float adamw_step(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets, int sequences,
                     double lr, double beta1, double beta2, double eps, double weight_decay);

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace weft_test
