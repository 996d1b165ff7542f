// How one pipeline stage's parameters, gradients and optimizer moments are spread over its
// data-parallel group, and the communication that keeps them consistent: the engine calls
// start_reduce at the program's REDUCE_GRAD, start_unshard/reshard at UNSHARD/RESHARD, and
// step after the program. ZeRO stage 0 (shard::replicate) averages whole gradients in
// buckets; stages 1..3 reduce-scatter them into this rank's range (shard/flat_shard.hpp),
// step the optimizer on that range only, and all-gather the parameters back (1, 2) or keep
// only the range until the next UNSHARD (3).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/core/error.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/shard/flat_shard.hpp"

namespace weft::shard {

// Bytes of training state a rank holds for a stage.
struct memory_figures {
    std::size_t parameters = 0;
    std::size_t gradients = 0;
    std::size_t optimizer_state = 0;
    friend memory_figures operator+(memory_figures a, const memory_figures& b) {
        return {a.parameters + b.parameters, a.gradients + b.gradients, a.optimizer_state + b.optimizer_state};
    }
    [[nodiscard]] std::size_t total() const { return parameters + gradients + optimizer_state; }
};

// Default replicate bucket: 4 Mi elements (16 MiB of fp32), in the range PyTorch DDP's
// 25 MB buckets and Megatron's 40 M-element buckets put it: big enough that each
// all-reduce runs near bandwidth, small enough that several overlap the compute after them.
inline constexpr std::size_t default_bucket_elements = std::size_t{1} << 22;

template <class Scalar, communicator Comm>
class stage_state {
public:
    // Collective-free: every rank of `data_group` builds its own with the same arguments.
    // Takes over the stage's buffers: under ZeRO it pads them, and drops what this rank
    // does not keep between steps.
    stage_state(nn::flat_parameters<Scalar>& stage, Comm& data_group, int zero_stage,
                std::size_t bucket_elements = default_bucket_elements)
        : stage_(&stage), group_(&data_group), zero_stage_(zero_stage), bucket_elements_(bucket_elements) {
        require(zero_stage >= 0 && zero_stage <= 3, "zero_stage", zero_stage, "valid ZeRO stages are 0, 1, 2 and 3");
        require(bucket_elements >= 1, "bucket_elements", bucket_elements, "must be >= 1");
        shard_ = shard_of(stage.registry().total_size(), data_group.size(), data_group.rank());
        if (zero_stage_ == 0) return;
        stage.pad_to_multiple_of(static_cast<std::size_t>(data_group.size()));
        if (zero_stage_ >= 2) stage.release_gradients();
        if (zero_stage_ == 3) {
            const auto all = stage.padded_parameters();
            param_shard_.assign(all.begin() + static_cast<std::ptrdiff_t>(shard_.offset),
                                all.begin() + static_cast<std::ptrdiff_t>(shard_.offset + shard_.size));
            stage.release_parameters();
        }
    }

    stage_state(const stage_state&) = delete;
    stage_state& operator=(const stage_state&) = delete;
    stage_state(stage_state&&) noexcept = default;
    stage_state& operator=(stage_state&&) noexcept = default;

    [[nodiscard]] int zero_stage() const { return zero_stage_; }
    [[nodiscard]] const flat_shard& shard() const { return shard_; }

    // Before the step's program: ZeRO-2/3 bring back a zeroed full gradient buffer for the
    // backward passes to accumulate into.
    void begin_step() {
        if (zero_stage_ >= 2 && !stage_->holds_gradients()) stage_->allocate_gradients();
        reduce_started_ = false;
        note_peak();
    }

    // UNSHARD (ZeRO-3): starts all-gathering the full parameters; compute waits for them
    // in finish_unshard. Other stages hold full parameters already: nothing to do.
    void start_unshard() {
        if (zero_stage_ != 3 || stage_->holds_parameters()) return;
        stage_->allocate_parameters();
        pending_gather_ = group_->iallgather(std::span<const Scalar>(param_shard_), stage_->padded_parameters());
        gathering_ = true;
        note_peak();
    }

    // Before any compute on the stage. A ZeRO-3 stage whose parameters were never
    // unsharded means the program lacks an UNSHARD: an error, not a read of freed memory.
    void finish_unshard() {
        if (gathering_) {
            pending_gather_.wait();
            gathering_ = false;
        }
        if (!stage_->holds_parameters())
            throw error(
                "ZeRO-3 stage used while its parameters are sharded: the program needs an UNSHARD of "
                "the stage before its first compute action");
    }

    // RESHARD (ZeRO-3): frees the full parameters; this rank keeps its range.
    void reshard() {
        if (zero_stage_ != 3) return;
        finish_unshard();
        stage_->release_parameters();
    }

    // REDUCE_GRAD: starts the reduction of the accumulated gradients. Replicate splits the
    // buffer into buckets, one non-blocking all-reduce each; ZeRO reduce-scatters the whole
    // padded buffer in one call, since buckets would interleave the ranks' ranges.
    void start_reduce() {
        require(!reduce_started_, "REDUCE_GRAD", "twice in one step", "each stage reduces its gradients once per step");
        reduce_started_ = true;
        if (zero_stage_ == 0) {
            if (group_->size() == 1) return;
            const auto grads = stage_->gradients();
            for (std::size_t first = 0; first < grads.size(); first += bucket_elements_)
                pending_reduce_.push_back(
                    group_->iallreduce_sum(grads.subspan(first, std::min(bucket_elements_, grads.size() - first))));
            return;
        }
        require(stage_->holds_gradients(), "REDUCE_GRAD", "without gradients",
                "the stage's full gradient buffer must exist (begin_step allocates it)");
        // The averaged range lives from here to the optimizer step.
        grad_shard_.assign(shard_.size, Scalar(0));
        note_peak();
        pending_reduce_.push_back(group_->ireduce_scatter_sum(std::span<const Scalar>(stage_->padded_gradients()),
                                                              std::span<Scalar>(grad_shard_)));
    }

    [[nodiscard]] bool reduce_started() const { return reduce_started_; }

    // Waits for the reduction and averages: each replica computed the mean loss of its
    // share of the batch, so the mean of the replicas' gradients is the global one.
    void finish_reduce() {
        if (!reduce_started_) start_reduce();
        for (auto& r : pending_reduce_) r.wait();
        pending_reduce_.clear();
        const Scalar scale = Scalar{1} / static_cast<Scalar>(group_->size());
        if (zero_stage_ == 0) {
            if (group_->size() > 1)
                for (Scalar& g : stage_->gradients()) g *= scale;
            return;
        }
        for (Scalar& g : grad_shard_) g *= scale;
        if (zero_stage_ >= 2) stage_->release_gradients();
    }

    // The optimizer step: step(params, grads, offset) updates params from grads, both
    // covering elements [offset, offset + params.size()) of the stage's flat layout. Then
    // ZeRO-1/2 all-gather the updated parameters, so every rank holds all of them again.
    template <class StepFn>
    void step(StepFn&& step_fn) {
        if (zero_stage_ == 0) {
            step_fn(stage_->parameters(), std::span<const Scalar>(stage_->gradients()), std::size_t{0});
            stage_->zero_gradients();
            return;
        }
        const std::size_t valid = shard_.valid();
        const auto grads = std::span<const Scalar>(grad_shard_).first(valid);
        if (zero_stage_ == 3) {
            step_fn(std::span<Scalar>(param_shard_).first(valid), grads, shard_.offset);
        } else {
            const auto all = stage_->padded_parameters();
            step_fn(all.subspan(shard_.offset, valid), grads, shard_.offset);
            // MPI forbids a send buffer inside the receive buffer; the range goes out of a copy.
            std::vector<Scalar> mine(all.begin() + static_cast<std::ptrdiff_t>(shard_.offset),
                                     all.begin() + static_cast<std::ptrdiff_t>(shard_.offset + shard_.size));
            group_->allgather(std::span<const Scalar>(mine), all);
            if (zero_stage_ == 1) stage_->zero_gradients();
        }
        std::vector<Scalar>().swap(grad_shard_);
    }

    // Runs fn() with the full parameters present (checkpoints, weight inspection),
    // gathering them first under ZeRO-3 and releasing them after. Collective over the group.
    template <class Fn>
    void with_full_parameters(Fn&& fn) {
        const bool gather = zero_stage_ == 3 && !stage_->holds_parameters();
        if (gather) start_unshard();
        finish_unshard();
        fn();
        if (gather) stage_->release_parameters();
    }

    // Runs fn() to write every parameter of the stage (a loaded checkpoint) and keeps what
    // this rank holds of them: under ZeRO-3 a full buffer exists only during the call, and
    // this rank's range is copied out of it. Not collective.
    template <class Fn>
    void overwrite_parameters(Fn&& fn) {
        const bool borrowed = zero_stage_ == 3 && !stage_->holds_parameters();
        if (borrowed) stage_->allocate_parameters();
        fn();
        if (zero_stage_ != 3) return;
        const auto all = stage_->padded_parameters();
        std::copy(all.begin() + static_cast<std::ptrdiff_t>(shard_.offset),
                  all.begin() + static_cast<std::ptrdiff_t>(shard_.offset + shard_.size), param_shard_.begin());
        if (borrowed) stage_->release_parameters();
    }

    // Parameters and gradients held now, and the most held at once since construction.
    [[nodiscard]] memory_figures held_now() const {
        memory_figures m;
        m.parameters = (stage_->holds_parameters() ? stage_->padded_size() : 0) + param_shard_.size();
        m.gradients = (stage_->holds_gradients() ? stage_->padded_size() : 0) + grad_shard_.size();
        m.parameters *= sizeof(Scalar);
        m.gradients *= sizeof(Scalar);
        return m;
    }
    [[nodiscard]] const memory_figures& peak() const { return peak_; }

private:
    void note_peak() {
        const auto now = held_now();
        peak_.parameters = std::max(peak_.parameters, now.parameters);
        peak_.gradients = std::max(peak_.gradients, now.gradients);
    }

    nn::flat_parameters<Scalar>* stage_;
    Comm* group_;
    int zero_stage_ = 0;
    std::size_t bucket_elements_ = default_bucket_elements;
    flat_shard shard_;
    std::vector<Scalar> param_shard_;  // ZeRO-3: this rank's range of the parameters
    std::vector<Scalar> grad_shard_;   // ZeRO-1..3, REDUCE_GRAD to step: this rank's range of the averaged gradients
    typename Comm::request pending_gather_;
    bool gathering_ = false;
    std::vector<typename Comm::request> pending_reduce_;
    bool reduce_started_ = false;
    memory_figures peak_;
};

}  // namespace weft::shard
