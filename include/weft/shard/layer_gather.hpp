// ZeRO-3's parameters layer by layer (the least-memory mode, `zero_reduce::microbatch`):
// during a step the stage's full parameter buffer is address space that holds no memory
// (core/state_vector.hpp's lazy zeros); the stage names each layer before it reads it
// (nn/layer_residency.hpp), this gathers that layer's parameters then, starts the next
// layer's meanwhile, and gives their pages back when the stage is done with them. So a
// rank holds its own range of the stage and about two layers at a time, instead of the
// whole stage from UNSHARD to RESHARD.
//
// A layer's elements belong to the one or two ranks whose contiguous ZeRO ranges
// (shard/flat_shard.hpp) it meets, and the rest of the group needs them: each rank writes
// its part of the layer into the (zero) layer range and the group sums the range in place.
// Adding zeros changes no value, so every rank gets the owners' parameters exactly; the
// ring all-reduce sends twice what an all-gather would (shard/collective_traffic.hpp),
// the price of keeping the contiguous ranges that checkpoints and layout switches move. A
// layout that gave every rank a piece of every layer (FSDP's) would gather with an
// all-gather instead.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <utility>

#include "weft/core/state_vector.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/nn/layer_residency.hpp"
#include "weft/shard/collective_traffic.hpp"
#include "weft/shard/stage_tensors.hpp"

namespace weft::shard {

template <class Scalar, class Comm>
class layer_gather final : public nn::layer_residency {
public:
    // `noted` is called whenever the parameters held grow (the sharding's peak).
    layer_gather(stage_tensors<Scalar>& tensors, Comm& group, collective_traffic& traffic,
                 std::function<void()> noted)
        : tensors_(&tensors), group_(&group), traffic_(&traffic), noted_(std::move(noted)) {}
    layer_gather(const layer_gather&) = delete;
    layer_gather& operator=(const layer_gather&) = delete;
    ~layer_gather() {
        try {
            end();
        } catch (...) {  // a failed group: the run reports it where it waits next
        }
    }

    [[nodiscard]] bool active() const { return active_; }

    // A step begins: the full buffer as empty address space, and the stage asks for layers.
    // A buffer already there (parameters gathered whole) is made anew: a gather adds the
    // owners' parts into zeros, which the rest of the layer must be.
    void begin() {
        auto& full = tensors_->full;
        full.release_parameters();
        full.allocate_parameters();
        tensors_->parameters_in_use = 0;
        full.set_residency(this);
        active_ = true;
    }
    // The step's compute is over: every layer let go and the buffer freed (this rank keeps
    // its range). Waits for a prefetch nobody used.
    void end() {
        if (!active_) return;
        for (auto& [first, layer] : held_)
            if (layer.gathering) layer.gather.wait();
        held_.clear();
        tensors_->full.set_residency(nullptr);
        tensors_->full.release_parameters();
        tensors_->parameters_in_use.reset();
        active_ = false;
    }

    void acquire(std::span<const nn::gradient_range> layers, std::span<const nn::gradient_range> next) override {
        for (const nn::gradient_range layer : layers) start(layer);
        for (const nn::gradient_range layer : next) start(layer);  // the prefetch
        for (const nn::gradient_range layer : layers) {
            held_layer& held = held_.at(layer.first);
            if (held.gathering) {
                held.gather.wait();
                held.gathering = false;
            }
            ++held.uses;
        }
    }

    void release(std::span<const nn::gradient_range> layers) noexcept override {
        for (const nn::gradient_range layer : layers) {
            const auto it = held_.find(layer.first);
            if (it == held_.end() || --it->second.uses > 0) continue;
            // Its pages go back; what the next gather writes must find zeros here.
            clear_and_release(tensors_->full.parameter_storage(), layer.first, layer.last);
            *tensors_->parameters_in_use -= layer.size();
            held_.erase(it);
        }
    }

private:
    struct held_layer {
        typename Comm::request gather;
        bool gathering = false;
        int uses = 0;
    };

    // Starts gathering `layer` unless it is held or on its way. Every rank of the group asks
    // for the same layers in the same order (they run the same program), as collectives need.
    void start(nn::gradient_range layer) {
        if (layer.empty() || held_.contains(layer.first)) return;
        auto& t = *tensors_;
        const auto all = t.full.padded_parameters();
        // This rank's part of the layer, from its range; the rest of the layer range is zero.
        const std::size_t own_first = std::max(layer.first, t.range.offset);
        const std::size_t own_last = std::min(layer.last, t.range.offset + t.range.valid());
        if (own_first < own_last)
            std::copy(t.parameter_range.begin() + static_cast<std::ptrdiff_t>(own_first - t.range.offset),
                      t.parameter_range.begin() + static_cast<std::ptrdiff_t>(own_last - t.range.offset),
                      all.begin() + static_cast<std::ptrdiff_t>(own_first));
        held_layer held;
        held.gather = group_->iallreduce_sum(all.subspan(layer.first, layer.size()));
        held.gathering = true;
        held_.emplace(layer.first, std::move(held));
        traffic_->gathered_bytes += all_reduce_bytes(layer.size(), sizeof(Scalar), group_->size());
        *t.parameters_in_use += layer.size();
        noted_();
    }

    stage_tensors<Scalar>* tensors_;
    Comm* group_;
    collective_traffic* traffic_;
    std::function<void()> noted_;
    std::map<std::size_t, held_layer> held_;  // by first element
    bool active_ = false;
};

}  // namespace weft::shard
