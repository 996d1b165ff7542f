// One layout the planner considers: the degrees, ZeRO stage, schedule, chunks per rank and
// micro-batches over `world` ranks (a layout may use fewer ranks than there are; the rest
// wait as spares). As text it is run::parse_layout's form plus the micro-batches:
// "pp=2,dp=2,zero=1,schedule=1f1b,microbatches=4" (tp and chunks when not 1).
#pragma once

#include <string>
#include <tuple>

#include "weft/core/parallel_config.hpp"
#include "weft/core/schedule_kind.hpp"

namespace weft::plan {

struct layout_candidate {
    int world = 1;  // ranks the layout uses: pp * dp * tp
    int pp = 1;
    int dp = 1;
    int tp = 1;
    int zero = 0;
    schedule_kind schedule{};
    int chunks = 1;
    int microbatches = 1;

    [[nodiscard]] parallel_config config() const {
        return parallel_config({.pp = pp, .dp = dp, .tp = tp, .zero_stage = zero, .microbatches = microbatches,
                                .chunks = chunks, .schedule = schedule, .world_size = world});
    }

    // run::parse_layout's keys (pp, dp, tp, zero, schedule, chunks), defaults of tp and chunks
    // left out; with world=W appended when asked (a layout on fewer ranks than launched).
    [[nodiscard]] std::string layout_text(bool with_world = false) const {
        std::string text = "pp=" + std::to_string(pp) + ",dp=" + std::to_string(dp);
        if (tp != 1) text += ",tp=" + std::to_string(tp);
        text += ",zero=" + std::to_string(zero) + ",schedule=";
        text += schedule.name();
        if (chunks != 1) text += ",chunks=" + std::to_string(chunks);
        if (with_world) text += ",world=" + std::to_string(world);
        return text;
    }

    // layout_text() and ",microbatches=M".
    [[nodiscard]] std::string text() const { return layout_text() + ",microbatches=" + std::to_string(microbatches); }

    friend bool operator==(const layout_candidate& a, const layout_candidate& b) {
        return std::tie(a.world, a.pp, a.dp, a.tp, a.zero, a.chunks, a.microbatches) ==
                   std::tie(b.world, b.pp, b.dp, b.tp, b.zero, b.chunks, b.microbatches) &&
               a.schedule == b.schedule;
    }
};

}  // namespace weft::plan
