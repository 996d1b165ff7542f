// Activation recompute: what a stage keeps of a micro-batch between its forward and its
// backward, traded against compute. `none` keeps every activation the backward needs;
// `full` keeps only the stage's input and runs the forward again at the backward (at its
// B, or its I when the backward is split), so a stage holds whole activations for the one
// micro-batch it is differentiating; `selective` keeps everything but what is large and
// cheap to compute again (GPT: the attention probabilities, heads x seq x seq per sequence;
// the MLP: the GELU outputs), which the backward recomputes (Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models", 2022). The kernels are
// deterministic, so the recomputed activations, and the losses, are the same bits.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::train {

enum class recompute_mode { none, full, selective };

[[nodiscard]] constexpr std::string_view to_string(recompute_mode mode) {
    switch (mode) {
        case recompute_mode::none: return "none";
        case recompute_mode::full: return "full";
        case recompute_mode::selective: return "selective";
    }
    return "?";
}

// "none", "full" or "selective"; `parameter` names the option in an error.
[[nodiscard]] inline recompute_mode parse_recompute_mode(std::string_view text, std::string_view parameter) {
    for (const auto mode : {recompute_mode::none, recompute_mode::full, recompute_mode::selective})
        if (text == to_string(mode)) return mode;
    throw invalid_argument(parameter, text,
                           "expected none, full or selective, or one of them per stage separated by commas");
}

// One mode for every stage ("full") or one per stage in stage order ("full,full,none").
[[nodiscard]] inline std::vector<recompute_mode> parse_recompute(std::string_view text, std::string_view parameter) {
    std::vector<recompute_mode> modes;
    std::size_t start = 0;
    while (true) {
        const std::size_t comma = text.find(',', start);
        modes.push_back(parse_recompute_mode(text.substr(start, comma - start), parameter));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return modes;
}

// The list as the option writes it.
[[nodiscard]] inline std::string recompute_text(const std::vector<recompute_mode>& modes) {
    if (modes.empty()) return "none";
    // Appended piecewise: GCC 12 warns falsely (-Wrestrict, bug 105329) on operator+ chains.
    std::string out;
    for (const auto mode : modes) {
        if (!out.empty()) out.push_back(',');
        out.append(to_string(mode));
    }
    return out;
}

// Checks that `modes` has no entry (none everywhere), one (for every stage) or one per stage.
inline void check_recompute(const std::vector<recompute_mode>& modes, int stages) {
    if (modes.size() <= 1 || modes.size() == static_cast<std::size_t>(stages)) return;
    std::string expected = "must be one mode for every stage or one per stage (";
    expected.append(std::to_string(stages)).append(" stages in this layout), each none, full or selective");
    throw invalid_argument("recompute", recompute_text(modes), expected);
}

// Stage `stage`'s mode under a checked list.
[[nodiscard]] inline recompute_mode recompute_of(const std::vector<recompute_mode>& modes, int stage) {
    if (modes.empty()) return recompute_mode::none;
    return modes.size() == 1 ? modes.front() : modes[static_cast<std::size_t>(stage)];
}

// A stage whose stash can drop what its backward recomputes (selective recompute).
template <class Stage>
concept selective_recompute = requires(const Stage& stage, typename Stage::stash& saved) {
    stage.drop_recomputable(saved);
};

}  // namespace weft::train
