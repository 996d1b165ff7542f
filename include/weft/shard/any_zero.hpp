// The sharding policy that takes its ZeRO stage from the run's parallel_config, so that one
// compiled engine serves every stage (0 = replicate, 1..3 = zero<1..3>), as sched::any_of
// lets one engine serve several schedules. Its code holds one of the four typed policies'
// stage_sharding, chosen at construction, and forwards every operation to it: an engine
// named with zero<2> instantiates ZeRO-2's code only, one named with any_zero all four.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>
#include <variant>

#include "weft/core/error.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/shard/flat_shard.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/shard/zero.hpp"

namespace weft::shard {

struct any_zero {
    static constexpr std::string_view name = "any_zero";
    static constexpr int zero_stage = -1;  // -1: parallel_config::zero_stage() decides
};

template <class Scalar, class Comm>
class stage_sharding<any_zero, Scalar, Comm> {
public:
    stage_sharding(stage_tensors<Scalar>& tensors, Comm& data_group, const sharding_options& options)
        : impl_(make(tensors, data_group, options)) {}

    [[nodiscard]] int zero_stage() const {
        return std::visit([](const auto& s) { return s.zero_stage(); }, impl_);
    }
    [[nodiscard]] const flat_shard& shard() const {
        return std::visit([](const auto& s) -> const flat_shard& { return s.shard(); }, impl_);
    }
    [[nodiscard]] bool reduce_started() const {
        return std::visit([](const auto& s) { return s.reduce_started(); }, impl_);
    }
    [[nodiscard]] memory_figures held_now() const {
        return std::visit([](const auto& s) { return s.held_now(); }, impl_);
    }
    [[nodiscard]] std::span<const Scalar> owned_gradients() const {
        return std::visit([](const auto& s) { return s.owned_gradients(); }, impl_);
    }
    [[nodiscard]] const memory_figures& peak() const {
        return std::visit([](const auto& s) -> const memory_figures& { return s.peak(); }, impl_);
    }
    [[nodiscard]] const collective_traffic& traffic() const {
        return std::visit([](const auto& s) -> const collective_traffic& { return s.traffic(); }, impl_);
    }
    [[nodiscard]] bool reduces_per_microbatch() const {
        return std::visit([](const auto& s) { return s.reduces_per_microbatch(); }, impl_);
    }

    void begin_step() { std::visit([](auto& s) { s.begin_step(); }, impl_); }
    void start_unshard() { std::visit([](auto& s) { s.start_unshard(); }, impl_); }
    void finish_unshard() { std::visit([](auto& s) { s.finish_unshard(); }, impl_); }
    void reshard() { std::visit([](auto& s) { s.reshard(); }, impl_); }
    void start_reduce() { std::visit([](auto& s) { s.start_reduce(); }, impl_); }
    void start_reduce_range(nn::gradient_range range) {
        std::visit([range](auto& s) { s.start_reduce_range(range); }, impl_);
    }
    template <class Averaging = host_averaging>
    void finish_reduce(Averaging&& averaging = {}) {
        std::visit([&](auto& s) { s.finish_reduce(averaging); }, impl_);
    }
    template <class StepFn>
    void step(StepFn&& step_fn) {
        std::visit([&](auto& s) { s.step(step_fn); }, impl_);
    }
    template <class Fn>
    void with_full_parameters(Fn&& fn) {
        std::visit([&](auto& s) { s.with_full_parameters(fn); }, impl_);
    }
    template <class Fn>
    void overwrite_parameters(Fn&& fn) {
        std::visit([&](auto& s) { s.overwrite_parameters(fn); }, impl_);
    }

private:
    using variant = std::variant<stage_sharding<replicate, Scalar, Comm>, stage_sharding<zero<1>, Scalar, Comm>,
                                 stage_sharding<zero<2>, Scalar, Comm>, stage_sharding<zero<3>, Scalar, Comm>>;

    static variant make(stage_tensors<Scalar>& tensors, Comm& group, const sharding_options& options) {
        switch (options.zero_stage) {
            case 0: return variant(std::in_place_index<0>, tensors, group, options);
            case 1: return variant(std::in_place_index<1>, tensors, group, options);
            case 2: return variant(std::in_place_index<2>, tensors, group, options);
            case 3: return variant(std::in_place_index<3>, tensors, group, options);
            default: break;
        }
        throw invalid_argument("zero_stage", options.zero_stage, "valid ZeRO stages are 0, 1, 2 and 3");
    }

    variant impl_;
};

}  // namespace weft::shard
