// The baseline SWARM is measured against: a static 1F1B pipeline (data-parallel replicas of
// one worker per stage) that survives failures the usual way. It writes a checkpoint every
// interval; when any worker fails, the whole job stops, a replacement is provisioned, and
// every worker reloads the last checkpoint, so the work since then is lost.
//
// A step of M micro-batches per replica takes 1F1B's (M - 1) x the slowest stage's F+B plus
// one pass through every stage (the fill and drain), each stage hop paying the latency both
// ways. The pipeline keeps its activations, so its backward does not recompute the forward,
// as SWARM's stateless calls must. The checkpoint interval defaults to Young's optimum,
// sqrt(2 x checkpoint time x the job's mean time between failures), the best case for it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::swarm::sim {

struct static_pipeline_model {
    std::vector<double> forward_seconds;  // per stage, one micro-batch's forward
    double backward_multiple = 2;
    double latency_seconds = 0.01;
    int replicas = 1;                  // data-parallel pipelines: workers = replicas x stages
    int microbatches_per_step = 256;   // the global batch, split over the replicas
    double apply_seconds = 0.5;        // the step's all-reduce and optimizer step
    double checkpoint_seconds = 30;    // the job pauses this long to write one
    double restart_seconds = 120;      // from a failure to training again: provision and reload
    double checkpoint_interval = 0;    // seconds of training between checkpoints; 0: Young's
    double duration_seconds = 3600;

    void validate() const {
        require(!forward_seconds.empty(), "forward_seconds", forward_seconds.size(), "must name at least one stage");
        for (std::size_t k = 0; k < forward_seconds.size(); ++k)
            require(forward_seconds[k] > 0 && std::isfinite(forward_seconds[k]),
                    "forward_seconds[" + std::to_string(k) + "]", forward_seconds[k], "must be finite and > 0");
        require(replicas >= 1, "replicas", replicas, "must be at least 1");
        require(microbatches_per_step >= replicas && microbatches_per_step % replicas == 0, "microbatches_per_step",
                microbatches_per_step, "must be a multiple of replicas " + std::to_string(replicas));
        require(checkpoint_seconds >= 0 && restart_seconds >= 0, "checkpoint_seconds", checkpoint_seconds,
                "and restart_seconds must be >= 0");
        require(checkpoint_interval >= 0, "checkpoint_interval", checkpoint_interval, "must be >= 0 (0: Young's)");
        require(duration_seconds > 0 && std::isfinite(duration_seconds), "duration_seconds", duration_seconds,
                "must be finite and > 0");
    }
    [[nodiscard]] double step_seconds() const {
        const double m = microbatches_per_step / replicas;
        double slowest = 0, pass = 0;
        for (const double f : forward_seconds) {
            const double fb = (1 + backward_multiple) * f;
            slowest = std::max(slowest, fb);
            pass += fb + 2 * latency_seconds;
        }
        return (m - 1) * slowest + pass + apply_seconds;
    }
    [[nodiscard]] int workers() const { return replicas * static_cast<int>(forward_seconds.size()); }
};

struct static_outcome {
    double microbatches = 0;  // in steps that were kept (checkpointed, or done by the end)
    double seconds = 0;
    long long restarts = 0;
    double checkpoint_interval = 0;  // as used
    [[nodiscard]] double microbatches_per_second() const { return seconds > 0 ? microbatches / seconds : 0; }
};

// Runs the static pipeline through `failures` (times, in seconds, when some worker fails).
// `mean_seconds_between_failures` of the whole job sets Young's interval (ignored when the
// model names one).
[[nodiscard]] inline static_outcome simulate_static(const static_pipeline_model& model, std::vector<double> failures,
                                                    double mean_seconds_between_failures) {
    model.validate();
    std::sort(failures.begin(), failures.end());
    const double step = model.step_seconds();
    double interval = model.checkpoint_interval;
    if (interval <= 0)
        interval = std::isfinite(mean_seconds_between_failures) && mean_seconds_between_failures > 0
                       ? std::sqrt(2 * model.checkpoint_seconds * mean_seconds_between_failures)
                       : model.duration_seconds;
    interval = std::max(interval, step);  // at least one step between checkpoints
    static_outcome out;
    out.seconds = model.duration_seconds;
    out.checkpoint_interval = interval;
    const double per_step = model.microbatches_per_step;
    double now = 0;
    std::size_t next_failure = 0;
    double saved = 0, unsaved = 0;  // micro-batches checkpointed, and done since
    double since_checkpoint = 0;
    while (now < model.duration_seconds) {
        const double failure = next_failure < failures.size() ? failures[next_failure] : INFINITY;
        if (failure <= now) {  // a failure while the job was down or writing: it restarts again
            ++next_failure;
            continue;
        }
        // The next thing the job does: a step, or a checkpoint once the interval is full.
        const bool checkpoint = since_checkpoint + step > interval && unsaved > 0;
        const double takes = checkpoint ? model.checkpoint_seconds : step;
        if (now + takes > failure) {  // it fails first: back to the last checkpoint
            ++out.restarts;
            ++next_failure;
            unsaved = 0;
            since_checkpoint = 0;
            now = failure + model.restart_seconds;
            continue;
        }
        if (now + takes > model.duration_seconds) break;
        now += takes;
        if (checkpoint) {
            saved += unsaved;
            unsaved = 0;
            since_checkpoint = 0;
        } else {
            unsaved += per_step;
            since_checkpoint += step;
        }
    }
    // What is done when the run ends is kept: the comparison does not charge a last save.
    out.microbatches = saved + unsaved;
    return out;
}

}  // namespace weft::swarm::sim
