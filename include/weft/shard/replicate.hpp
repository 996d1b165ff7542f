// Plain data parallelism: every replica holds the whole stage and the gradients
// are averaged over the data-parallel group before the optimizer step.
#pragma once

#include <span>
#include <string_view>

#include "weft/comm/communicator.hpp"

namespace weft::shard {

struct replicate {
    static constexpr std::string_view name = "replicate";
    static constexpr int zero_stage = 0;

    // Averages `gradients` over `data_group`. Each replica computed the mean loss of
    // its share of the batch, so the mean of the replicas' gradients is the gradient
    // of the global mean loss.
    template <communicator Comm, class Scalar>
    static void reduce_gradients(Comm& data_group, std::span<Scalar> gradients) {
        if (data_group.size() == 1) return;
        data_group.allreduce_sum(gradients);
        const Scalar scale = Scalar{1} / static_cast<Scalar>(data_group.size());
        for (Scalar& g : gradients) g *= scale;
    }
};

}  // namespace weft::shard
