// The parallel layout of a run as runtime values: pipeline, data and tensor
// degrees, ZeRO stage, micro-batches, chunks per rank and the schedule. Policies are
// types, sizes are values, so one binary runs any size; a config that cannot run is
// rejected when it is constructed, with a message naming the offending field.
#pragma once

#include <string>

#include "weft/core/error.hpp"
#include "weft/core/schedule_kind.hpp"

namespace weft {

// The fields a user sets; designated initialisers read like a sentence:
//   weft::parallel_config cfg({.pp = 4, .microbatches = 8, .world_size = 4});
struct parallel_options {
    int pp = 1;            // pipeline stages (ranks along the pipeline)
    int dp = 1;            // data-parallel replicas
    int tp = 1;            // tensor-parallel ranks
    int zero_stage = 0;    // 0 = plain data parallel, 1..3 = ZeRO stage
    int microbatches = 1;  // micro-batches per step
    int chunks = 1;        // model chunks (virtual stages) per pipeline rank
    // None chosen (the default): an engine runs the first schedule of its compile-time set
    // (engine<any_of<zb_h1, one_f_one_b>, ...> runs zb_h1) and reports it in config().
    // Choose one with e.g. weft::sched::one_f_one_b::kind or sched::parse_schedule_kind("1f1b").
    schedule_kind schedule{};
    int world_size = 1;    // ranks in the communicator the run uses
};

class parallel_config {
public:
    explicit parallel_config(const parallel_options& options) : options_(options) { validate(); }

    [[nodiscard]] int pp() const { return options_.pp; }
    [[nodiscard]] int dp() const { return options_.dp; }
    [[nodiscard]] int tp() const { return options_.tp; }
    [[nodiscard]] int zero_stage() const { return options_.zero_stage; }
    [[nodiscard]] int microbatches() const { return options_.microbatches; }
    [[nodiscard]] int chunks() const { return options_.chunks; }
    [[nodiscard]] schedule_kind schedule() const { return options_.schedule; }
    [[nodiscard]] int world_size() const { return options_.world_size; }
    [[nodiscard]] int num_stages() const { return options_.pp * options_.chunks; }
    [[nodiscard]] const parallel_options& options() const { return options_; }

private:
    void validate() const {
        const auto& o = options_;
        require(o.pp >= 1, "pp", o.pp, "pipeline degree must be >= 1");
        require(o.dp >= 1, "dp", o.dp, "data-parallel degree must be >= 1");
        require(o.tp >= 1, "tp", o.tp, "tensor-parallel degree must be >= 1");
        require(o.zero_stage >= 0 && o.zero_stage <= 3, "zero_stage", o.zero_stage,
                "valid ZeRO stages are 0, 1, 2 and 3");
        require(o.microbatches >= 1, "microbatches", o.microbatches, "must be >= 1");
        require(o.chunks >= 1, "chunks", o.chunks, "must be >= 1");
        require(o.world_size >= 1, "world_size", o.world_size, "must be >= 1");
        // Widen before multiplying so absurd degrees cannot overflow into a match.
        const long long ranks = static_cast<long long>(o.pp) * o.dp * o.tp;
        require(ranks == o.world_size, "pp*dp*tp", ranks,
                "must equal the world size " + std::to_string(o.world_size) + " (pp=" +
                    std::to_string(o.pp) + ", dp=" + std::to_string(o.dp) + ", tp=" +
                    std::to_string(o.tp) + ")");
        // Chunks per rank are fixed by the schedule's stage placement, and 1F1B needs enough
        // micro-batches to fill its warm-up; the schedule's description says which (the
        // generators check the rest). With none chosen the engine checks its default, later.
        if (o.schedule.chosen()) o.schedule.check_layout(o.pp, o.microbatches, o.chunks);
    }

    parallel_options options_;
};

}  // namespace weft
