// What every stage_sharding specialization shares: the stage's tensors and data-parallel
// group it works on, the in-step flag that REDUCE_GRAD ran, and the memory it held at
// most since construction (what the engine's memory report and the ZeRO formulas check).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/comm/host_completion.hpp"

#include "weft/core/error.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/optim/gradient_scale.hpp"
#include "weft/shard/collective_traffic.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_tensors.hpp"

namespace weft::shard::detail {

template <class Scalar, class Comm>
class stage_sharding_base {
public:
    stage_sharding_base(const stage_sharding_base&) = delete;
    stage_sharding_base& operator=(const stage_sharding_base&) = delete;
    stage_sharding_base(stage_sharding_base&&) noexcept = default;
    stage_sharding_base& operator=(stage_sharding_base&&) noexcept = default;

    [[nodiscard]] const flat_shard& shard() const { return tensors_->range; }
    [[nodiscard]] bool reduce_started() const { return reduce_started_; }

    // Parameters and gradients held now, the averaged gradient range between REDUCE_GRAD and
    // the optimizer step included, and the most held at once since construction.
    [[nodiscard]] memory_figures held_now() const {
        memory_figures m = tensors_->held();
        m.gradients += grad_range_.size() * sizeof(Scalar);
        return m;
    }
    [[nodiscard]] const memory_figures& peak() const { return peak_; }
    // The bytes this rank's collectives for the stage sent in the current (or last) step.
    [[nodiscard]] const collective_traffic& traffic() const { return traffic_; }

protected:
    stage_sharding_base(stage_tensors<Scalar>& tensors, Comm& group) : tensors_(&tensors), group_(&group) {}
    ~stage_sharding_base() = default;

    void note_peak() {
        const auto now = held_now();
        peak_.parameters = std::max(peak_.parameters, now.parameters);
        peak_.gradients = std::max(peak_.gradients, now.gradients);
    }

    // finish_reduce's end: completes the group's reductions into `summed` and averages it
    // (shard::host_averaging on the host; otherwise `averaging`, a backend's stream-ordered
    // scale kernel, after waits that only order its stream: see sharding.hpp).
    template <class Request, class Averaging>
    void complete_and_average(std::span<Request> reductions, std::span<Scalar> summed, Averaging& averaging) {
        constexpr bool on_host = std::is_same_v<std::remove_cvref_t<Averaging>, host_averaging>;
        for (Request& r : reductions) {
            if constexpr (on_host)
                comm::complete_on_host(r);
            else
                r.wait();
        }
        if (group_->size() == 1) return;  // the sum of one is the mean
        const Scalar factor = Scalar{1} / static_cast<Scalar>(group_->size());
        if constexpr (on_host)
            optim::scale_on_host(summed, factor);
        else
            averaging(summed, factor);
    }

    // Tensors built whole (a fresh stage) are in form 0; tensors a policy already holds are
    // in its own form with the range of this rank of this group.
    void require_form(int stage, std::string_view policy) const {
        const auto& t = *tensors_;
        require(t.zero_stage == 0 || t.zero_stage == stage, "stage tensors' ZeRO stage", t.zero_stage,
                std::string("must be 0 (whole) or ") + std::to_string(stage) + " for sharding " + std::string(policy) +
                    " (a layout switch converts tensors between ZeRO stages)");
    }

    stage_tensors<Scalar>* tensors_;
    Comm* group_;
    bool reduce_started_ = false;
    // ZeRO, REDUCE_GRAD to step: this rank's range of the averaged gradients. In the state
    // memory the sharding is made in (the backend's), so that a GPU's reduce-scatter writes
    // it and its optimizer kernels read it where they run.
    state_vector<Scalar> grad_range_;
    memory_figures peak_;
    collective_traffic traffic_;  // begin_step resets it
};

}  // namespace weft::shard::detail
