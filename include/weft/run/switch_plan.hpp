// A plan of layout switches (--switch STEP:key=value,...), parsed and checked at start-up
// against the model and the ranks launched, so that no switch fails after hours of training.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/run/layout.hpp"

namespace weft::run {

struct planned_switch {
    long long step;  // the switch happens before this step
    parallel_config config;
    std::vector<int> partition;
    std::string text;
};

// Each text names its whole layout (omitted keys take run::layout's defaults, world keeps its
// value), and the steps come in increasing order below `steps`. Refuses, naming the switch,
// a layout that cannot run on an engine of type Engine.
template <class Engine, class ModelConfig, class EngineOptions>
std::vector<planned_switch> plan_switches(const std::vector<std::string>& texts, long long steps, int microbatches,
                                          int launched, const ModelConfig& model, const EngineOptions& options,
                                          double staging_mib) {
    require(staging_mib * 1048576.0 >= sizeof(float), "--staging-mib", staging_mib,
            "must hold at least one element (" + std::to_string(sizeof(float)) + " bytes)");
    std::vector<planned_switch> out;
    int world = launched;
    for (const std::string& text : texts) {
        const layout_switch s = parse_layout_switch(text);
        require(s.step < steps, "--switch " + text + ": STEP", s.step,
                "must be below --steps " + std::to_string(steps) +
                    " (a switch comes before a step, and the run ends at --steps)");
        require(out.empty() || s.step > out.back().step, "--switch " + text + ": STEP", s.step,
                "must come after the previous --switch's step; give the switches in order of their steps");
        const int w = s.to.world != 0 ? s.to.world : world;
        require(w <= launched, "--switch " + text + ": world", w,
                "must be at most the " + std::to_string(launched) +
                    " ranks launched (a smaller world leaves the others as spares)");
        try {
            out.push_back({s.step, check_layout<Engine>(s.to, microbatches, w, model, options), s.to.partition, text});
        } catch (const error& e) {
            throw invalid_argument("--switch", text, std::string("cannot run: ") + e.what());
        }
        world = w;
    }
    return out;
}

}  // namespace weft::run
