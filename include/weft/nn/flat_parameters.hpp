// A stage's trainable tensors as one value: the registry of its named tensors, and one flat
// buffer each for their values and their gradients in the registry's layout. Optimizers,
// checkpoints, gradient reductions and layout switches work on these buffers; a stage's
// layers only know offsets into them, so the same tensors can be built, moved between
// owners and handed to a stage that computes with them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/nn/layer_residency.hpp"

namespace weft::nn {

template <class Scalar>
class flat_parameters {
public:
    flat_parameters() = default;
    // Zero-filled buffers sized to the registry.
    explicit flat_parameters(parameter_registry registry) : registry_(std::move(registry)) {
        padded_size_ = registry_.total_size();
        allocate_parameters();
        allocate_gradients();
    }

    // Both buffers released, padded to a multiple of `shards`: a layout switch allocates
    // them one at a time, as it fills them, so that the old and new states are never both
    // whole in memory.
    [[nodiscard]] static flat_parameters released(parameter_registry registry, std::size_t shards) {
        flat_parameters out;
        out.registry_ = std::move(registry);
        out.padded_size_ = out.registry_.total_size();
        out.pad_to_multiple_of(shards);
        return out;
    }

    // The registry's elements; empty while released (see below).
    [[nodiscard]] std::span<Scalar> parameters() { return std::span<Scalar>(params_).first(held(params_)); }
    [[nodiscard]] std::span<const Scalar> parameters() const {
        return std::span<const Scalar>(params_).first(held(params_));
    }
    [[nodiscard]] std::span<Scalar> gradients() { return std::span<Scalar>(grads_).first(held(grads_)); }
    [[nodiscard]] std::span<const Scalar> gradients() const {
        return std::span<const Scalar>(grads_).first(held(grads_));
    }
    // Where the buffer lives (a GPU's managed memory: on the GPU; core/state_memory.hpp).
    void zero_gradients() { grads_.get_allocator().memory().fill_zero(grads_.data(), grads_.size() * sizeof(Scalar)); }
    // The memory the gradients live in, which copies them where they are.
    [[nodiscard]] const state_memory& gradient_memory() const { return grads_.get_allocator().memory(); }
    [[nodiscard]] const parameter_registry& registry() const { return registry_; }

    // For sharding (shard/): the buffers padded with zeros to a multiple of the number of
    // shards, so that every shard has the same length, and released between uses (ZeRO-2
    // frees the full gradients between steps, ZeRO-3 the full parameters outside the
    // schedule's use of the stage). A released buffer's span is empty.
    void pad_to_multiple_of(std::size_t shards) {
        require(shards >= 1, "pad_to_multiple_of: shards", shards, "must be >= 1");
        const std::size_t total = registry_.total_size();
        padded_size_ = (total + shards - 1) / shards * shards;
        if (!params_.empty()) params_.resize(padded_size_, Scalar(0));
        if (!grads_.empty()) grads_.resize(padded_size_, Scalar(0));
    }
    [[nodiscard]] std::size_t padded_size() const { return padded_size_; }
    [[nodiscard]] std::span<Scalar> padded_parameters() { return params_; }
    [[nodiscard]] std::span<const Scalar> padded_parameters() const { return params_; }
    [[nodiscard]] std::span<Scalar> padded_gradients() { return grads_; }
    [[nodiscard]] bool holds_parameters() const { return !params_.empty(); }
    [[nodiscard]] bool holds_gradients() const { return !grads_.empty(); }
    // Released buffers keep their memory (core/state_memory.hpp): what is allocated again
    // lands where the rest of the state is, whichever scope is in force then.
    void release_parameters() { state_vector<Scalar>(params_.get_allocator()).swap(params_); }
    void release_gradients() { state_vector<Scalar>(grads_.get_allocator()).swap(grads_); }
    // Zero-filled, padded; the caller fills the parameters (e.g. by an all-gather). The zeros
    // are the ones the state memory allocates (core/state_vector.hpp's lazy_zeros), not
    // written by the host: on a GPU the buffers stay on the device (ZeRO-2/3 allocate them
    // every step), and in host memory a page takes memory only once written (a layout switch
    // fills the parameters as the data arrives).
    void allocate_parameters() { params_ = lazy_zeros<Scalar>(padded_size_, params_.get_allocator().memory()); }
    void allocate_gradients() { grads_ = lazy_zeros<Scalar>(padded_size_, grads_.get_allocator().memory()); }
    // The parameters' buffer itself, for a layout switch to give its pages back as it empties it.
    [[nodiscard]] state_vector<Scalar>& parameter_storage() { return params_; }
    [[nodiscard]] const state_vector<Scalar>& parameter_storage() const { return params_; }
    // The gradients' buffer itself, for a layout switch to put one made ahead in place
    // (elastic/reserved_buffers.hpp).
    [[nodiscard]] state_vector<Scalar>& gradient_storage() { return grads_; }

    // Who brings layers' parameters in as the stage reads them (nn/layer_residency.hpp); null:
    // all are present. Set by a sharding for the span of a training step, not copied.
    [[nodiscard]] layer_residency* residency() const { return residency_.pointer; }
    void set_residency(layer_residency* residency) { residency_.pointer = residency; }

private:
    [[nodiscard]] std::size_t held(const state_vector<Scalar>& buffer) const {
        return std::min(buffer.size(), registry_.total_size());
    }

    parameter_registry registry_;
    state_vector<Scalar> params_;
    state_vector<Scalar> grads_;
    std::size_t padded_size_ = 0;
    // A copy or a move starts with none: the residency serves the buffers it was set on.
    struct no_copy_pointer {
        layer_residency* pointer = nullptr;
        no_copy_pointer() = default;
        no_copy_pointer(const no_copy_pointer&) noexcept {}
        no_copy_pointer& operator=(const no_copy_pointer&) noexcept {
            pointer = nullptr;
            return *this;
        }
    };
    no_copy_pointer residency_;
};

}  // namespace weft::nn
