// Tensors several stages hold a copy of (GPT-2's wte: the embedding on the first stage, the
// LM head on the last). Every copy gets the sum of all copies' gradients before the
// optimizer step, so the copies, which start equal, take identical steps and stay equal. A
// stage holding such a copy cannot start its data-parallel reduction at its REDUCE_GRAD:
// the sum over the pipeline comes first (the engine reduces it after sum()).
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/host_completion.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/models/pipeline_model.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/nn/partition.hpp"

namespace weft::train {

template <class Scalar, communicator Comm>
class tied_gradients {
public:
    // `units[s]` and `stage_rank[s]`: the units and pipeline rank of every stage. Collective
    // over `pipeline`: every rank splits it once per tied tensor, holder or not.
    tied_gradients(const std::vector<models::tied_parameter>& tied, const std::vector<nn::unit_range>& units,
                   const std::vector<int>& stage_rank, Comm& pipeline) {
        const int me = pipeline.rank();
        for (const auto& t : tied) {
            std::vector<int> holder_ranks;
            tie entry{t.name, {}, nullptr};
            for (std::size_t s = 0; s < units.size(); ++s) {
                bool holds = false;
                for (const int unit : t.units) holds = holds || (unit >= units[s].first && unit < units[s].last);
                if (!holds) continue;
                holder_ranks.push_back(stage_rank[s]);
                if (stage_rank[s] == me) entry.local_stages.push_back(static_cast<int>(s));
            }
            std::sort(holder_ranks.begin(), holder_ranks.end());
            holder_ranks.erase(std::unique(holder_ranks.begin(), holder_ranks.end()), holder_ranks.end());
            const bool holds_here = !entry.local_stages.empty();
            if (holder_ranks.size() > 1) {
                Comm group = pipeline.split(holds_here ? 0 : 1, me);
                if (holds_here) entry.holders = std::make_unique<Comm>(std::move(group));
            }
            if (holds_here && (entry.local_stages.size() > 1 || entry.holders)) ties_.push_back(std::move(entry));
        }
    }

    // Whether stage `stage` holds a copy that other stages share: its reduction waits for sum().
    [[nodiscard]] bool holds(int stage) const {
        for (const auto& t : ties_)
            if (std::find(t.local_stages.begin(), t.local_stages.end(), stage) != t.local_stages.end()) return true;
        return false;
    }

    // The gradient ranges of stage `stage`'s tied copies in its flat buffer (`registry`): not
    // final when its backward ends, since sum() adds the other copies to them.
    [[nodiscard]] std::vector<nn::gradient_range> ranges_of(int stage, const parameter_registry& registry) const {
        std::vector<nn::gradient_range> out;
        for (const auto& t : ties_)
            if (std::find(t.local_stages.begin(), t.local_stages.end(), stage) != t.local_stages.end()) {
                const auto& info = registry.find(t.name);
                out.push_back({info.offset, info.offset + info.size});
            }
        return out;
    }

    // Sums every tied tensor's gradients over its copies on this rank, then over the holding
    // ranks, and writes the sum into every local copy. `tensors_of(stage)` gives a stage's
    // flat_parameters, whose gradients the host may read (the engine has synchronized its
    // backend). Collective over the holding ranks.
    //
    // The first local copy carries the sum: the others are added into it on the host, it is
    // all-reduced in place, and it is copied into them by the state memory. With one local
    // copy (any layout but a V-shaped one) the tensor stays where it is: over NCCL the sum
    // moves no page of it to the host, and only the compute stream waits for it.
    template <class TensorsOf>
    void sum(TensorsOf&& tensors_of) {
        for (auto& t : ties_) {
            const auto copy_of = [&](int stage) {
                nn::flat_parameters<Scalar>& tensors = tensors_of(stage);
                const auto& info = tensors.registry().find(t.name);
                return tensors.gradients().subspan(info.offset, info.size);
            };
            const std::span<Scalar> total = copy_of(t.local_stages.front());
            for (std::size_t k = 1; k < t.local_stages.size(); ++k) {
                const std::span<const Scalar> more = copy_of(t.local_stages[k]);
                for (std::size_t i = 0; i < total.size(); ++i) total[i] += more[i];
            }
            if (t.holders) {
                auto reduction = t.holders->iallreduce_sum(total);
                // The copies below are made on the host's word: the sum must be complete there.
                if (t.local_stages.size() > 1)
                    comm::complete_on_host(reduction);
                else
                    reduction.wait();
            }
            const state_memory& memory = tensors_of(t.local_stages.front()).gradient_memory();
            for (std::size_t k = 1; k < t.local_stages.size(); ++k)
                memory.copy_bytes(copy_of(t.local_stages[k]).data(), total.data(), total.size_bytes());
        }
    }

private:
    struct tie {
        std::string name;
        std::vector<int> local_stages;
        std::unique_ptr<Comm> holders;  // null when this rank is the only holder
    };
    std::vector<tie> ties_;
};

}  // namespace weft::train
