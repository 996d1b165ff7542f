// The communicators one layout's engine (train/layout_engine.hpp) runs over: the process
// grid's pipeline, data-parallel and tensor-parallel groups, the pipeline's further channels
// (one per route, for a communicator that pairs messages in posting order), and the groups of
// each tied tensor's holders. They are made by splits, collective over the layout's ranks.
//
// An engine usually makes them as it is built. An elastic grow makes them ahead instead
// (weft::engine::prepare_layout): on the old ranks' start thread and on the joiners, over the
// merged world, while the old ranks train on (run/joiner_start.hpp); the switch then only
// adopts them, and its stall has no split in it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/process_grid.hpp"
#include "weft/train/tied_gradients.hpp"

namespace weft::train {

template <class Scalar, communicator Comm>
struct layout_groups {
    comm::process_grid<Comm> grid;
    std::vector<Comm> extra_channels;  // the pipeline's channels after the first (grid.pipeline())
    tied_gradients<Scalar, Comm> ties;
};

}  // namespace weft::train
