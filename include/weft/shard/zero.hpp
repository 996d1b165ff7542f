// ZeRO (Rajbhandari et al., SC'20) over the data-parallel group, as a sharding policy whose
// code is the stage_sharding specialization below:
//   zero<1>: optimizer moments sharded; every rank keeps full parameters and gradients.
//   zero<2>: gradients reduce-scattered too; the full gradient buffer lives only from the
//            step's first backward to its REDUCE_GRAD.
//   zero<3>: parameters sharded as well; the program's UNSHARD all-gathers a stage's
//            parameters ahead of its first use and RESHARD frees them after its last.
// The stage's flat buffers are padded to a multiple of the group and cut into equal ranges
// (shard/flat_shard.hpp): gradients are reduce-scattered into this rank's range, the
// optimizer steps that range only, and the parameters are all-gathered back (1, 2) or kept
// as the range until the next UNSHARD (3).
// That is the per-step mode. In the per-micro-batch mode (shard/zero_reduce.hpp) ZeRO-2/3
// reduce each layer as a micro-batch's backward finishes it (shard/layer_reduce.hpp) and
// ZeRO-3 gathers its parameters layer by layer (shard/layer_gather.hpp) instead.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/comm/host_completion.hpp"
#include "weft/core/error.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/shard/detail/stage_sharding_base.hpp"
#include "weft/shard/flat_shard.hpp"
#include "weft/shard/layer_gather.hpp"
#include "weft/shard/layer_reduce.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_tensors.hpp"

namespace weft::shard {

template <int Stage>
struct zero {
    static_assert(Stage >= 1 && Stage <= 3, "weft::shard::zero<Stage>: valid ZeRO stages are 1, 2 and 3");
    static constexpr int zero_stage = Stage;
    static constexpr std::string_view name = Stage == 1 ? "zero<1>" : Stage == 2 ? "zero<2>" : "zero<3>";
};

template <int Stage, class Scalar, class Comm>
class stage_sharding<zero<Stage>, Scalar, Comm> : public detail::stage_sharding_base<Scalar, Comm> {
    using base = detail::stage_sharding_base<Scalar, Comm>;

public:
    // Collective-free: every rank of `data_group` builds its own with the same arguments.
    // Whole tensors (a fresh stage) are brought into this stage's form: padded, and what this
    // rank does not keep between steps dropped. Tensors already in it are checked to hold
    // this rank's range of this group.
    stage_sharding(stage_tensors<Scalar>& tensors, Comm& data_group, const sharding_options& options)
        : base(tensors, data_group),
          per_microbatch_(Stage >= 2 && options.reduce == zero_reduce::microbatch),
          kept_(options.reduced_after_program) {
        require(options.zero_stage == Stage, "zero_stage", options.zero_stage,
                std::string("sharding ") + std::string(zero<Stage>::name) + " is ZeRO stage " +
                    std::to_string(Stage) + " (shard::any_zero takes the config's stage)");
        this->require_form(Stage, zero<Stage>::name);
        const flat_shard range =
            shard_of(tensors.registry().total_size(), data_group.size(), data_group.rank());
        if (tensors.zero_stage == Stage) {
            require(tensors.range.offset == range.offset && tensors.range.size == range.size &&
                        tensors.range.padded == range.padded,
                    "stage tensors' ZeRO range", std::to_string(tensors.range.offset) + "+" +
                                                     std::to_string(tensors.range.size),
                    "must be this rank's range of a data-parallel group of " + std::to_string(data_group.size()) +
                        " (" + std::to_string(range.offset) + "+" + std::to_string(range.size) + ")");
            return;
        }
        tensors.range = range;
        tensors.zero_stage = Stage;
        auto& full = tensors.full;
        full.pad_to_multiple_of(static_cast<std::size_t>(data_group.size()));
        if constexpr (Stage >= 2) full.release_gradients();
        if constexpr (Stage == 3) {
            const auto all = full.padded_parameters();
            tensors.parameter_range.assign(all.begin() + static_cast<std::ptrdiff_t>(range.offset),
                                           all.begin() + static_cast<std::ptrdiff_t>(range.offset + range.size));
            full.release_parameters();
        }
    }

    [[nodiscard]] static constexpr int zero_stage() { return Stage; }
    // Whether gradients are reduced layer by layer per micro-batch (shard/zero_reduce.hpp).
    [[nodiscard]] bool reduces_per_microbatch() const { return per_microbatch_; }

    // Before the step's program: ZeRO-2/3 bring back a zeroed full gradient buffer for the
    // backward passes to accumulate into. Per micro-batch, that buffer and (ZeRO-3) the
    // parameters' are address space whose layers take memory only while in use, and this
    // rank's range of the summed gradients lives all step.
    void begin_step() {
        auto& t = *this->tensors_;
        if constexpr (Stage >= 2)
            if (!t.full.holds_gradients()) t.full.allocate_gradients();
        this->reduce_started_ = false;
        this->traffic_ = {};
        if (per_microbatch_) {
            this->grad_range_ = lazy_zeros<Scalar>(t.range.size, this->grad_range_.get_allocator().memory());
            reducer_ = std::make_unique<layer_reduce<Scalar, Comm>>(t, *this->group_, this->traffic_,
                                                                    [this] { this->note_peak(); });
            reducer_->begin(std::span<Scalar>(this->grad_range_), kept_);
            if constexpr (Stage == 3) {
                gatherer_ = std::make_unique<layer_gather<Scalar, Comm>>(t, *this->group_, this->traffic_,
                                                                         [this] { this->note_peak(); });
                gatherer_->begin();
            }
        }
        this->note_peak();
    }

    // UNSHARD (ZeRO-3): starts all-gathering the full parameters; compute waits for them in
    // finish_unshard. Stages 1 and 2 hold full parameters already; so does a ZeRO-3 step that
    // gathers layer by layer (its stage asks for each layer as it reads it).
    void start_unshard() {
        if (gathers_layers()) return;
        if constexpr (Stage == 3) {
            auto& t = *this->tensors_;
            if (t.full.holds_parameters()) return;
            t.full.allocate_parameters();
            pending_gather_ =
                this->group_->iallgather(std::span<const Scalar>(t.parameter_range), t.full.padded_parameters());
            this->traffic_.gathered_bytes += all_gather_bytes(t.full.padded_size(), sizeof(Scalar), this->group_->size());
            gathering_ = true;
            this->note_peak();
        }
    }

    // Before any compute on the stage. A ZeRO-3 stage whose parameters were never unsharded
    // means the program lacks an UNSHARD: an error, not a read of freed memory. The wait
    // orders the stage's kernels after the gather; `for_host` completes it for the host.
    // Per micro-batch it first completes the stage's layer reductions, whose ranges the
    // coming backward adds to again (shard/layer_reduce.hpp).
    void finish_unshard(bool for_host = false) {
        if (reducer_) reducer_->complete();
        if (gathers_layers()) return;
        if (gathering_) {
            if (for_host)
                comm::complete_on_host(pending_gather_);
            else
                pending_gather_.wait();
            gathering_ = false;
        }
        if (!this->tensors_->full.holds_parameters())
            throw error(
                "ZeRO-3 stage used while its parameters are sharded: the program needs an UNSHARD of "
                "the stage before its first compute action");
    }

    // RESHARD (ZeRO-3): frees the full parameters; this rank keeps its range.
    void reshard() {
        if (gathers_layers()) return;
        if constexpr (Stage == 3) {
            finish_unshard();
            this->tensors_->full.release_parameters();
        }
    }

    // A micro-batch's backward has added all it adds to `range`: per micro-batch its sum
    // starts now; per step ZeRO waits for REDUCE_GRAD, whose one reduce-scatter covers the
    // whole buffer.
    void start_reduce_range(nn::gradient_range range) {
        if (reducer_) reducer_->start(range);
    }

    // REDUCE_GRAD: reduce-scatters the whole padded gradient buffer into this rank's range in
    // one call (buckets would interleave the ranks' ranges).
    void start_reduce() {
        require(!this->reduce_started_, "REDUCE_GRAD", "twice in one step",
                "each stage reduces its gradients once per step");
        this->reduce_started_ = true;
        auto& full = this->tensors_->full;
        require(full.holds_gradients(), "REDUCE_GRAD", "without gradients",
                "the stage's full gradient buffer must exist (begin_step allocates it)");
        if (reducer_) {  // the layers went per micro-batch; what none reported goes now
            reducer_->start_rest();
            this->note_peak();
            return;
        }
        // The averaged range lives from here to the optimizer step.
        // Zeros from the state memory, not written by the host (see flat_parameters).
        this->grad_range_ = lazy_zeros<Scalar>(this->tensors_->range.size, this->grad_range_.get_allocator().memory());
        this->note_peak();
        pending_reduce_ = this->group_->ireduce_scatter_sum(std::span<const Scalar>(full.padded_gradients()),
                                                            std::span<Scalar>(this->grad_range_));
        this->traffic_.reduced_bytes += reduce_scatter_bytes(full.padded_size(), sizeof(Scalar), this->group_->size());
        reducing_ = true;
    }

    // Waits for the reduction and averages it over the replicas (see replicate), on the host
    // or by the kernel `averaging` names (see host_averaging).
    template <class Averaging = host_averaging>
    void finish_reduce(Averaging&& averaging = {}) {
        if (!this->reduce_started_) start_reduce();
        if (reducer_) {
            reducer_->end();
            reducer_.reset();
        }
        if (gatherer_) {  // the step's compute is over: the stage's parameters go back to the range
            gatherer_->end();
            gatherer_.reset();
        }
        const std::span<typename Comm::request> reductions(&pending_reduce_, reducing_ ? 1 : 0);
        this->complete_and_average(reductions, std::span<Scalar>(this->grad_range_), averaging);
        reducing_ = false;
        if constexpr (Stage >= 2) this->tensors_->full.release_gradients();
    }

    // The optimizer step: step_fn(params, grads, offset) updates this rank's range, covering
    // elements [offset, offset + params.size()) of the stage's flat layout. ZeRO-1/2 then
    // all-gather the updated parameters, so every rank holds all of them again.
    // The reduced gradients step() applies: this rank's range of them, between finish_reduce()
    // and step() (empty outside it); the ranges of the group's ranks partition the stage.
    [[nodiscard]] std::span<const Scalar> owned_gradients() const {
        if (this->grad_range_.empty()) return {};
        return std::span<const Scalar>(this->grad_range_).first(this->tensors_->range.valid());
    }

    template <class StepFn>
    void step(StepFn&& step_fn) {
        auto& t = *this->tensors_;
        const std::size_t valid = t.range.valid();
        const auto grads = std::span<const Scalar>(this->grad_range_).first(valid);
        if constexpr (Stage == 3) {
            step_fn(std::span<Scalar>(t.parameter_range).first(valid), grads, t.range.offset);
        } else {
            const auto all = t.full.padded_parameters();
            step_fn(all.subspan(t.range.offset, valid), grads, t.range.offset);
            // MPI forbids a send buffer inside the receive buffer; the range goes out of a copy,
            // made where the state lives (a GPU's: the copy and the gather move no page to the
            // host, and NCCL reads it where it is).
            // (The allocator is named, not a temporary: GCC 13 warns of a reference that a
            // temporary's member function returns, though memory() outlives every allocator.)
            const auto allocator = this->grad_range_.get_allocator();
            const state_memory& memory = allocator.memory();
            state_vector<Scalar> mine = lazy_zeros<Scalar>(t.range.size, memory);
            memory.copy_bytes(mine.data(), all.data() + t.range.offset, t.range.size * sizeof(Scalar));
            this->group_->allgather(std::span<const Scalar>(mine), all);
            this->traffic_.gathered_bytes += all_gather_bytes(all.size(), sizeof(Scalar), this->group_->size());
            if constexpr (Stage == 1) t.full.zero_gradients();
        }
        state_vector<Scalar>(this->grad_range_.get_allocator()).swap(this->grad_range_);  // frees it
    }

    // Runs fn() with the full parameters present (checkpoints, weight inspection), gathering
    // them first under ZeRO-3 and releasing them after. Collective over the group.
    template <class Fn>
    void with_full_parameters(Fn&& fn) {
        const bool gather = Stage == 3 && !this->tensors_->full.holds_parameters();
        if (gather) start_unshard();
        finish_unshard(true);
        fn();
        if (gather) this->tensors_->full.release_parameters();
    }

    // Runs fn() to write every parameter of the stage (a loaded checkpoint) and keeps what
    // this rank holds of them: under ZeRO-3 a full buffer exists only during the call, and
    // this rank's range is copied out of it. Not collective.
    template <class Fn>
    void overwrite_parameters(Fn&& fn) {
        auto& t = *this->tensors_;
        const bool borrowed = Stage == 3 && !t.full.holds_parameters();
        if (borrowed) t.full.allocate_parameters();
        fn();
        if constexpr (Stage == 3) {
            const auto all = t.full.padded_parameters();
            std::copy(all.begin() + static_cast<std::ptrdiff_t>(t.range.offset),
                      all.begin() + static_cast<std::ptrdiff_t>(t.range.offset + t.range.size),
                      t.parameter_range.begin());
            if (borrowed) t.full.release_parameters();
        }
    }

private:
    // ZeRO-3 in a per-micro-batch step: the stage asks for its layers one by one.
    [[nodiscard]] bool gathers_layers() const { return gatherer_ != nullptr && gatherer_->active(); }

    bool per_microbatch_;
    std::vector<nn::gradient_range> kept_;  // reduced after the program (tied copies)
    // Per micro-batch, from begin_step to finish_reduce (made per step: they point at this).
    std::unique_ptr<layer_reduce<Scalar, Comm>> reducer_;
    std::unique_ptr<layer_gather<Scalar, Comm>> gatherer_;
    typename Comm::request pending_gather_;
    bool gathering_ = false;
    typename Comm::request pending_reduce_;
    bool reducing_ = false;
};

}  // namespace weft::shard
