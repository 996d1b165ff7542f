// Plain data parallelism: every replica holds the whole stage and the gradients are
// averaged over the data-parallel group before the optimizer step, in buckets started by
// the program's REDUCE_GRAD so that they travel while later actions compute.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/shard/detail/stage_sharding_base.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_tensors.hpp"

namespace weft::shard {

struct replicate {
    static constexpr std::string_view name = "replicate";
    static constexpr int zero_stage = 0;
};

template <class Scalar, class Comm>
class stage_sharding<replicate, Scalar, Comm> : public detail::stage_sharding_base<Scalar, Comm> {
    using base = detail::stage_sharding_base<Scalar, Comm>;

public:
    // Collective-free: every rank of `data_group` builds its own with the same arguments.
    stage_sharding(stage_tensors<Scalar>& tensors, Comm& data_group, const sharding_options& options)
        : base(tensors, data_group), bucket_elements_(options.bucket_elements) {
        require(options.zero_stage == 0, "zero_stage", options.zero_stage,
                "sharding replicate is ZeRO stage 0 (shard::any_zero takes the config's stage)");
        require(bucket_elements_ >= 1, "bucket_elements", bucket_elements_, "must be >= 1");
        this->require_form(0, "replicate");
    }

    [[nodiscard]] static constexpr int zero_stage() { return 0; }

    void begin_step() {
        this->reduce_started_ = false;
        this->note_peak();
    }
    // Parameters are always whole: nothing to gather or free.
    void start_unshard() {}
    void finish_unshard() {}
    void reshard() {}

    // REDUCE_GRAD: one non-blocking all-reduce per bucket of the accumulated gradients.
    void start_reduce() {
        require(!this->reduce_started_, "REDUCE_GRAD", "twice in one step",
                "each stage reduces its gradients once per step");
        this->reduce_started_ = true;
        if (this->group_->size() == 1) return;
        const auto grads = this->tensors_->full.gradients();
        for (std::size_t first = 0; first < grads.size(); first += bucket_elements_)
            pending_.push_back(
                this->group_->iallreduce_sum(grads.subspan(first, std::min(bucket_elements_, grads.size() - first))));
    }

    // Waits for the reduction and averages: each replica computed the mean loss of its share
    // of the batch, so the mean of the replicas' gradients is the global one. On the host, or
    // by the compute backend's kernel that `averaging` names (see host_averaging).
    template <class Averaging = host_averaging>
    void finish_reduce(Averaging&& averaging = {}) {
        if (!this->reduce_started_) start_reduce();
        this->complete_and_average(std::span(pending_), this->tensors_->full.gradients(), averaging);
        pending_.clear();
    }

    // The reduced gradients step() applies: all of them, the same on every replica.
    [[nodiscard]] std::span<const Scalar> owned_gradients() const {
        return std::as_const(this->tensors_->full).gradients();
    }

    // step_fn(params, grads, offset) on the whole stage, then the gradients restart at zero.
    template <class StepFn>
    void step(StepFn&& step_fn) {
        auto& full = this->tensors_->full;
        step_fn(full.parameters(), std::span<const Scalar>(full.gradients()), std::size_t{0});
        full.zero_gradients();
    }

    template <class Fn>
    void with_full_parameters(Fn&& fn) {
        fn();
    }
    template <class Fn>
    void overwrite_parameters(Fn&& fn) {
        fn();
    }

private:
    std::size_t bucket_elements_;
    std::vector<typename Comm::request> pending_;
};

}  // namespace weft::shard
