// The one line per step that every weft run prints, in the style of Megatron and
// llm.c: "step 12 | loss 3.4812 | lr 3.0e-04 | norm 1.2034 | 41.2 ms | 12 480 tok/s | bubble 7.9% | MFU 31%".
// Fields a run does not measure (lr, tokens, MFU) are left out rather than printed as 0.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace weft::train {

struct step_stats {
    long long step = 0;
    double loss = 0;
    double milliseconds = 0;
    double samples_per_second = 0;
    double bubble = -1;  // mean idle fraction of the ranks' programs; < 0 when not measured
    // The timed simulator's for the same program at the compute costs the ranks measured
    // (messages free); < 0 when not known (a GPU's compute is not timed by kind).
    double simulated_bubble = -1;
    double lr = -1;                  // < 0: not printed
    double tokens_per_second = -1;   // >= 0: printed as tok/s instead of samples/s
    double mfu = -1;                 // model FLOPs utilisation in [0, 1]; < 0: not printed
    double grad_norm = -1;           // the global gradient norm before clipping; < 0: not printed
    // Mean over the ranks of the time from the end of a rank's program to its data-parallel
    // reductions done: what the backward did not hide of them; < 0: not measured.
    double exposed_reduce_ms = -1;
    // Seconds from the run's start to this step's end, on the rank that logs; < 0: not logged.
    // A log line may be written later than its step ended (run/held_step_lines.hpp), so a
    // reader that times the gaps between steps reads this, not the line's arrival.
    double ended_seconds = -1;
    // -1: the step was applied. Otherwise its loss or gradients were not finite, it was not
    // applied, and this is the stage where that showed first (train/finite_guard.hpp).
    int nonfinite_stage = -1;

    [[nodiscard]] bool applied() const { return nonfinite_stage < 0; }
};

// JSON has no NaN or infinity: a value that is not finite is written as null.
[[nodiscard]] inline std::string json_number(double value) {
    if (!std::isfinite(value)) return "null";
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", value);
    return text;
}

// Groups thousands with a thin space-like blank, as llm.c does, so big rates stay readable.
[[nodiscard]] inline std::string group_thousands(long long value) {
    std::string digits = std::to_string(value < 0 ? -value : value);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ' ';
        out += digits[i];
    }
    return value < 0 ? "-" + out : out;
}

[[nodiscard]] inline std::string format_step(const step_stats& s) {
    char head[128];
    std::snprintf(head, sizeof head, "step %lld | loss %.4f | ", s.step, s.loss);
    std::string line = head;
    if (s.lr >= 0) {
        char lr[32];
        std::snprintf(lr, sizeof lr, "lr %.1e | ", s.lr);
        line += lr;
    }
    if (!(s.grad_norm < 0)) {  // measured (NaN and infinity included)
        char norm[32];
        std::snprintf(norm, sizeof norm, "norm %.4f | ", s.grad_norm);
        line += norm;
    }
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.1f ms | ", s.milliseconds);
    line += ms;
    if (s.tokens_per_second >= 0)
        line += group_thousands(static_cast<long long>(s.tokens_per_second + 0.5)) + " tok/s";
    else
        line += group_thousands(static_cast<long long>(s.samples_per_second + 0.5)) + " samples/s";
    if (s.bubble >= 0) {
        char bubble[32];
        std::snprintf(bubble, sizeof bubble, " | bubble %.1f%%", 100.0 * s.bubble);
        line += bubble;
        if (s.simulated_bubble >= 0) {
            std::snprintf(bubble, sizeof bubble, " (simulated %.1f%%)", 100.0 * s.simulated_bubble);
            line += bubble;
        }
    }
    if (s.mfu >= 0) {
        char mfu[32];
        std::snprintf(mfu, sizeof mfu, " | MFU %.0f%%", 100.0 * s.mfu);
        line += mfu;
    }
    if (!s.applied()) line += " | not applied: non-finite from stage " + std::to_string(s.nonfinite_stage);
    return line;
}

// The same step as one JSON object (train_gpt's --log-json, one per line): step, loss,
// ms, tokens_per_s, bubble, simulated_bubble, grad_norm and exposed_reduce_ms (when known), with 9 significant digits so that
// losses compare exactly, and "nonfinite_stage" on a step that was not applied. Always
// valid JSON: a loss or norm that is not finite is null.
[[nodiscard]] inline std::string format_step_json(const step_stats& s) {
    std::string line = "{\"step\": " + std::to_string(s.step) + ", \"loss\": " + json_number(s.loss) +
                       ", \"ms\": " + json_number(s.milliseconds) + ", \"tokens_per_s\": " +
                       json_number(s.tokens_per_second) + ", \"bubble\": " + json_number(s.bubble);
    if (s.simulated_bubble >= 0) line += ", \"simulated_bubble\": " + json_number(s.simulated_bubble);
    if (!(s.grad_norm < 0)) line += ", \"grad_norm\": " + json_number(s.grad_norm);
    if (s.exposed_reduce_ms >= 0) line += ", \"exposed_reduce_ms\": " + json_number(s.exposed_reduce_ms);
    if (!(s.ended_seconds < 0)) line += ", \"ended_s\": " + json_number(s.ended_seconds);
    if (!s.applied()) line += ", \"nonfinite_stage\": " + std::to_string(s.nonfinite_stage);
    return line + "}";
}

}  // namespace weft::train
