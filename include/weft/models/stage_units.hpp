// Which units of a model each pipeline stage holds: the counts a user gave, or by default
// balanced by the model's estimated cost per unit where it gives one (GPT: flops), else as
// even as possible in unit count. The engine and the SWARM trainer cut models the same way.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/nn/partition.hpp"

namespace weft::models {

// `partition`: units per stage (empty: the default).
template <class Model>
[[nodiscard]] std::vector<nn::unit_range> stage_units(const typename Model::config& model, int stages,
                                                      const std::vector<int>& partition = {}) {
    const int num_units = Model::num_units(model);
    if (!partition.empty()) return nn::partition_from_counts(partition, num_units, stages);
    if constexpr (requires { Model::unit_costs(model); }) {
        const std::vector<double> costs = Model::unit_costs(model);
        require(static_cast<int>(costs.size()) == num_units, "unit_costs size", costs.size(),
                "the model policy must give one cost per unit (" + std::to_string(num_units) + ")");
        return nn::partition_by_cost(costs, stages);
    } else {
        return nn::partition_units(num_units, stages);
    }
}

}  // namespace weft::models
