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
    schedule_kind schedule = schedule_kind::one_f_one_b;
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
        // Chunks (model pieces per rank) are fixed by the schedule's stage placement; the
        // generators check the rest (micro-batch counts each schedule needs).
        const std::string schedule_text = "schedule " + std::string(to_string(o.schedule));
        switch (o.schedule) {
            case schedule_kind::gpipe:
            case schedule_kind::one_f_one_b:
            case schedule_kind::zb_h1:
            case schedule_kind::zb_h2:
            case schedule_kind::zb_auto:
                require(o.chunks == 1, "chunks", o.chunks, schedule_text + " runs one stage per rank; valid: 1");
                break;
            case schedule_kind::zbv:
            case schedule_kind::dualpipev:
                require(o.chunks == 2, "chunks", o.chunks,
                        schedule_text + " places two stages per rank in a V; valid: 2");
                break;
            case schedule_kind::interleaved:
            case schedule_kind::looped_bfs:
                break;  // any chunks >= 1, checked above
            default:
                throw invalid_argument("schedule", static_cast<int>(o.schedule),
                                       "expected a weft::schedule_kind: " + schedule_name_list());
        }
        if (o.schedule == schedule_kind::one_f_one_b)
            require(o.microbatches >= o.pp, "microbatches", o.microbatches,
                    "schedule 1f1b needs at least as many micro-batches as pipeline stages (pp = " +
                        std::to_string(o.pp) + ")");
    }

    parallel_options options_;
};

}  // namespace weft
