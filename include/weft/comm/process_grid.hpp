// Splits a world communicator into the pipeline, data-parallel and tensor-parallel
// groups of a parallel_config. Placement: rank = (pp_index * dp + dp_index) * tp + tp_index, so
// tensor-parallel ranks are adjacent (they talk most), then data-parallel replicas,
// and pipeline stages are farthest apart (they exchange only activations).
#pragma once

#include <string>
#include <utility>

#include "weft/comm/communicator.hpp"
#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"

namespace weft::comm {

struct grid_coordinates {
    int pp_index = 0;
    int dp_index = 0;
    int tp_index = 0;
};

[[nodiscard]] inline grid_coordinates grid_coordinates_of(int rank, const parallel_config& cfg) {
    require(rank >= 0 && rank < cfg.world_size(), "rank", rank,
            "must be in [0, " + std::to_string(cfg.world_size()) + ")");
    return {rank / (cfg.dp() * cfg.tp()), (rank / cfg.tp()) % cfg.dp(), rank % cfg.tp()};
}

[[nodiscard]] inline int grid_rank_of(const grid_coordinates& c, const parallel_config& cfg) {
    return (c.pp_index * cfg.dp() + c.dp_index) * cfg.tp() + c.tp_index;
}

template <communicator Comm>
class process_grid {
public:
    // Collective over `world`: every rank must call it with the same config.
    process_grid(Comm& world, const parallel_config& cfg)
        : coordinates_(checked_coordinates(world, cfg)),
          pipeline_(world.split(coordinates_.dp_index * cfg.tp() + coordinates_.tp_index,
                                coordinates_.pp_index)),
          data_(world.split(coordinates_.pp_index * cfg.tp() + coordinates_.tp_index,
                            coordinates_.dp_index)),
          tensor_(world.split(coordinates_.pp_index * cfg.dp() + coordinates_.dp_index, coordinates_.tp_index)) {}

    [[nodiscard]] const grid_coordinates& coordinates() const { return coordinates_; }
    // Ranks holding the successive stages of one model replica; rank i here is pp_index i.
    [[nodiscard]] Comm& pipeline() { return pipeline_; }
    // Ranks holding the same stage in different replicas; rank i here is dp_index i.
    [[nodiscard]] Comm& data() { return data_; }
    // Ranks holding slices of the same stage of the same replica; rank i here is tp_index i.
    [[nodiscard]] Comm& tensor() { return tensor_; }

private:
    static grid_coordinates checked_coordinates(const Comm& world, const parallel_config& cfg) {
        require(world.size() == cfg.world_size(), "communicator size", world.size(),
                "must equal the config's world size " + std::to_string(cfg.world_size()) +
                    " (pp*dp*tp)");
        return grid_coordinates_of(world.rank(), cfg);
    }

    grid_coordinates coordinates_;
    Comm pipeline_;
    Comm data_;
    Comm tensor_;
};

}  // namespace weft::comm
