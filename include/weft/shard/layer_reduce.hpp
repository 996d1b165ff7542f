// ZeRO-2/3's gradients reduced per micro-batch (the least-memory mode,
// `zero_reduce::microbatch`): as soon as a backward has added a layer's weight gradients
// for one micro-batch (nn/final_gradients.hpp), the group sums that layer's range, each rank
// adds its own part of the sum to its ZeRO range of the step's gradients, and the layer's
// pages of the full gradient buffer go back (core/state_vector.hpp's clear_and_release). The
// full buffer then holds only the layers whose reduction is in flight, and the ranges kept
// for after the program (tied copies, summed over the pipeline first), instead of the whole
// stage from the first backward to REDUCE_GRAD.
//
// As layer_gather, the sum is an all-reduce of the layer range: a layer meets one or two
// ranks' contiguous ranges, and only they keep part of it. Traffic is per micro-batch,
// where the per-step mode reduce-scatters once (shard/collective_traffic.hpp counts both).
// The sums add micro-batch by micro-batch rather than rank by rank over the accumulated
// gradients, so the trained values agree with the per-step mode within rounding.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/shard/collective_traffic.hpp"
#include "weft/shard/stage_tensors.hpp"

namespace weft::shard {

template <class Scalar, class Comm>
class layer_reduce {
public:
    // `noted` is called whenever the gradients held grow (the sharding's peak).
    layer_reduce(stage_tensors<Scalar>& tensors, Comm& group, collective_traffic& traffic, std::function<void()> noted)
        : tensors_(&tensors), group_(&group), traffic_(&traffic), noted_(std::move(noted)) {}
    layer_reduce(const layer_reduce&) = delete;
    layer_reduce& operator=(const layer_reduce&) = delete;
    ~layer_reduce() {
        try {
            for (pending& p : pending_) p.sum.wait();
        } catch (...) {  // a failed group: the run reports it where it waits next
        }
    }

    // A step begins: the sums go into `owned` (this rank's ZeRO range, zero); `kept` are the
    // ranges reduced after the program, which the gradient buffer holds all step.
    void begin(std::span<Scalar> owned, std::span<const nn::gradient_range> kept) {
        owned_ = owned;
        std::size_t kept_elements = 0;
        for (const nn::gradient_range r : kept) kept_elements += r.size();
        tensors_->gradients_in_use = kept_elements;
        reported_.clear();
    }

    // A micro-batch's backward has added all it adds to `layer`: its sum starts.
    void start(nn::gradient_range layer) { start_sum(layer, true); }
    // Before the stage's next compute (whose backward adds to these ranges again) and before
    // the optimizer: every started sum done, added to this rank's range, its pages given back.
    void complete() {
        while (!pending_.empty()) complete_oldest();
    }

    // REDUCE_GRAD: what no backward reported (the kept ranges, or a stage that reports
    // nothing) is reduced now, as the layers were.
    void start_rest() {
        complete();
        const std::size_t total = tensors_->registry().total_size();
        const std::vector<nn::gradient_range> rest = nn::ranges_outside({0, total}, reported_);
        // With no sum in flight, what the buffer holds is exactly these ranges.
        std::size_t held = 0;
        for (const nn::gradient_range part : rest) held += part.size();
        tensors_->gradients_in_use = held;
        for (const nn::gradient_range part : rest) start_sum(part, false);
    }

    // The step's sums are all in `owned`.
    void end() {
        complete();
        tensors_->gradients_in_use.reset();
    }

private:
    // Sums in flight at once: a backward's layers finish one after another, and a sum waits
    // for the next layer's compute at most; more in flight would hold more layers' pages.
    static constexpr std::size_t max_in_flight = 2;

    void complete_oldest() {
        auto& t = *tensors_;
        pending& p = pending_.front();
        p.sum.wait();
        const auto summed = t.full.padded_gradients();
        const std::size_t first = std::max(p.layer.first, t.range.offset);
        const std::size_t last = std::min(p.layer.last, t.range.offset + t.range.valid());
        for (std::size_t i = first; i < last; ++i) owned_[i - t.range.offset] += summed[i];
        clear_and_release(t.full.gradient_storage(), p.layer.first, p.layer.last);
        *t.gradients_in_use -= p.layer.size();
        pending_.pop_front();
    }

    void start_sum(nn::gradient_range layer, bool count) {
        if (layer.empty()) return;
        auto& full = tensors_->full;
        require(full.holds_gradients(), "per-micro-batch reduction", "without gradients",
                "the stage's gradient buffer must exist (begin_step allocates it)");
        for (const pending& p : pending_)
            require(p.layer.last <= layer.first || layer.last <= p.layer.first, "gradient range",
                    std::to_string(layer.first) + ".." + std::to_string(layer.last),
                    "must not overlap a range whose reduction is in flight");
        while (pending_.size() >= max_in_flight) complete_oldest();
        pending_.push_back({layer, group_->iallreduce_sum(full.padded_gradients().subspan(layer.first, layer.size()))});
        traffic_->reduced_bytes += all_reduce_bytes(layer.size(), sizeof(Scalar), group_->size());
        if (count) {
            *tensors_->gradients_in_use += layer.size();
            noted_();
        }
        if (std::none_of(reported_.begin(), reported_.end(),
                         [&](nn::gradient_range r) { return r.first == layer.first && r.last == layer.last; }))
            reported_.push_back(layer);
    }

    struct pending {
        nn::gradient_range layer;
        typename Comm::request sum;
    };

    stage_tensors<Scalar>* tensors_;
    Comm* group_;
    collective_traffic* traffic_;
    std::function<void()> noted_;
    std::span<Scalar> owned_;
    std::deque<pending> pending_;  // oldest first
    std::vector<nn::gradient_range> reported_;  // distinct ranges started this step
};

}  // namespace weft::shard
