// Plain data parallelism: every replica holds the whole stage and the gradients are
// averaged over the data-parallel group before the optimizer step, in buckets that travel
// while later work computes: each layer's range as soon as the step's last backward of the
// stage has finished it (start_reduce_range), the rest at the program's REDUCE_GRAD.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/nn/final_gradients.hpp"
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
    // Whole gradients by definition: reduced once per step (shard/zero_reduce.hpp).
    [[nodiscard]] static constexpr bool reduces_per_microbatch() { return false; }

    void begin_step() {
        this->reduce_started_ = false;
        this->traffic_ = {};
        started_.clear();
        this->note_peak();
    }
    // Parameters are always whole: nothing to gather or free.
    void start_unshard() {}
    void finish_unshard() {}
    void reshard() {}

    // Starts reducing `range` of the gradients, final for this step (the last backward of the
    // stage has added to it; nn/final_gradients.hpp): one non-blocking all-reduce per bucket
    // of at most bucket_elements. Every replica runs the same program, so every replica
    // starts the same ranges in the same order, as collectives on one group must.
    void start_reduce_range(nn::gradient_range range) {
        require(!this->reduce_started_, "gradient range", "after REDUCE_GRAD",
                "a layer's gradients are final before its stage's REDUCE_GRAD");
        const auto grads = this->tensors_->full.gradients();
        require(range.first <= range.last && range.last <= grads.size(), "gradient range", text_of(range),
                "must lie within the stage's " + std::to_string(grads.size()) + " gradients");
        if (range.empty()) return;
        for (const nn::gradient_range done : started_)
            require(range.last <= done.first || range.first >= done.last, "gradient range", text_of(range),
                    "overlaps " + text_of(done) + ", started already this step (each element is reduced once)");
        started_.push_back(range);
        start_buckets(grads, range);
    }

    // REDUCE_GRAD: starts the gradients no start_reduce_range started, in buckets.
    void start_reduce() {
        require(!this->reduce_started_, "REDUCE_GRAD", "twice in one step",
                "each stage reduces its gradients once per step");
        this->reduce_started_ = true;
        const auto grads = this->tensors_->full.gradients();
        std::sort(started_.begin(), started_.end(),
                  [](nn::gradient_range a, nn::gradient_range b) { return a.first < b.first; });
        std::size_t next = 0;
        for (const nn::gradient_range done : started_) {  // disjoint: start_reduce_range checks
            start_buckets(grads, {next, done.first});
            next = done.last;
        }
        start_buckets(grads, {next, grads.size()});
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
    [[nodiscard]] static std::string text_of(nn::gradient_range r) {
        return "[" + std::to_string(r.first) + ", " + std::to_string(r.last) + ")";
    }

    void start_buckets(std::span<Scalar> grads, nn::gradient_range range) {
        if (this->group_->size() == 1) return;  // the sum of one is the mean
        for (std::size_t first = range.first; first < range.last; first += bucket_elements_) {
            const std::size_t size = std::min(bucket_elements_, range.last - first);
            pending_.push_back(this->group_->iallreduce_sum(grads.subspan(first, size)));
            this->traffic_.reduced_bytes += all_reduce_bytes(size, sizeof(Scalar), this->group_->size());
        }
    }

    std::size_t bucket_elements_;
    std::vector<nn::gradient_range> started_;  // this step's ranges started before REDUCE_GRAD
    std::vector<typename Comm::request> pending_;
};

}  // namespace weft::shard
