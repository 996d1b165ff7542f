// How a stage tells the owner of its parameters which layers it is about to read, so that
// parameters need not all be present at once: ZeRO-3 in its least-memory mode
// (shard/layer_gather.hpp) gathers a layer's parameters just before the stage reads them,
// fetches the next layer's meanwhile, and frees them after. A stage reads a layer's
// parameters only inside a layers_in_use scope of its flat_parameters; with no residency
// set (every other sharding, and ZeRO-3 outside a training step), the scope does nothing
// and all parameters are present.
#pragma once

#include <span>
#include <utility>

#include "weft/nn/final_gradients.hpp"

namespace weft::nn {

class layer_residency {
public:
    // The parameters in `layers` (flat ranges, as the stage's layers' gradient ranges) must be
    // present from now until release(layers); `next` are the ones the stage reads after
    // them (empty: none), which may be fetched meanwhile.
    virtual void acquire(std::span<const gradient_range> layers, std::span<const gradient_range> next) = 0;
    // The stage is done reading `layers` for now (it acquires them again before the next read).
    virtual void release(std::span<const gradient_range> layers) noexcept = 0;

protected:
    layer_residency() = default;
    layer_residency(const layer_residency&) = default;
    layer_residency& operator=(const layer_residency&) = default;
    ~layer_residency() = default;
};

// A stage type that reads parameters only inside layers_in_use scopes says so with
// `static constexpr bool names_layer_reads = true`: ZeRO-3's per-layer gathering needs it
// (any other read would find zeros), and the engine refuses that mode for a stage without.
template <class Stage>
concept names_layer_reads = requires {
    requires Stage::names_layer_reads;
};

// A scope in which a stage reads the parameters of `layers` (see above); `Tensors` is the
// stage's flat_parameters.
template <class Tensors>
class layers_in_use {
public:
    layers_in_use(const Tensors& tensors, std::span<const gradient_range> layers,
                  std::span<const gradient_range> next = {})
        : residency_(tensors.residency()), layers_(layers) {
        if (residency_ != nullptr) residency_->acquire(layers_, next);
    }
    layers_in_use(const layers_in_use&) = delete;
    layers_in_use& operator=(const layers_in_use&) = delete;
    ~layers_in_use() {
        if (residency_ != nullptr) residency_->release(layers_);
    }

private:
    layer_residency* residency_;
    std::span<const gradient_range> layers_;
};

}  // namespace weft::nn
