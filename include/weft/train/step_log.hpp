// The one line per step that every weft run prints, in the style of Megatron and
// llm.c: "step 12 | loss 3.4812 | 41.2 ms | 12 480 samples/s".
#pragma once

#include <cstdio>
#include <string>

namespace weft::train {

struct step_stats {
    long long step = 0;
    double loss = 0;
    double milliseconds = 0;
    double samples_per_second = 0;
    double bubble = -1;  // idle fraction of the step on the busiest rank; < 0 when not measured
};

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
    std::snprintf(head, sizeof head, "step %lld | loss %.4f | %.1f ms | ", s.step, s.loss, s.milliseconds);
    std::string line = head;
    line += group_thousands(static_cast<long long>(s.samples_per_second + 0.5)) + " samples/s";
    if (s.bubble >= 0) {
        char bubble[32];
        std::snprintf(bubble, sizeof bubble, " | bubble %.1f%%", 100.0 * s.bubble);
        line += bubble;
    }
    return line;
}

}  // namespace weft::train
