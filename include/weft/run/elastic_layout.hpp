// The layout an elastic run goes on in after an event: the planner's fastest (weft/plan/) for
// the ranks there are, keeping the run's micro-batches (the data each step sees stays the
// same), with no memory budget (the run's own layout fitted, and fewer ranks hold more each;
// a run that must bound it gives the trainer its own chooser, trainer::elastic_layout) and the
// planner's default unit costs (the relative costs of the schedules' actions).
#pragma once

#include <limits>

#include "weft/core/parallel_config.hpp"
#include "weft/plan/cost_model.hpp"
#include "weft/plan/planner.hpp"
#include "weft/train/engine_options.hpp"

namespace weft::run {

// Over at most `ranks` ranks (a layout on fewer leaves the rest as spares), for the engine's
// model and options, from the current layout `current`. Throws a weft::error when no layout of
// the engine runs there.
template <class Engine>
[[nodiscard]] parallel_config choose_elastic_layout(int ranks, const parallel_config& current,
                                                    const typename Engine::model_config& model,
                                                    const train::engine_options& options) {
    plan::search_space space;
    space.microbatches = {current.microbatches()};
    const plan::planned_layout chosen = plan::choose_layout<Engine>(
        ranks, std::numeric_limits<long long>::max() / 4, model, options, plan::cost_model{}, space);
    return chosen.layout.config();
}

}  // namespace weft::run
