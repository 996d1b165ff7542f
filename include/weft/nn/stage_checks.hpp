// The checks a pipeline stage (gpt_stage, mlp_stage) makes of the stash it is handed, in one
// place so that every stage refuses a misused stash with the same words.
#pragma once

#include <string>

#include "weft/core/error.hpp"

namespace weft::nn {

// forward: the stash must be fresh or released by backward_weight.
template <class Stash>
void check_stash_empty(const Stash& s) {
    require(s.empty(), "forward: stash", "in use", "must be empty (finish backward_weight first)");
}

// backward_input (and a whole backward): the stash must hold this micro-batch's forward, and
// dy (dy_rows x dy_cols) the forward's rows and the stage's output width.
template <class Stash>
void check_backward_input(const Stash& s, int dy_rows, int dy_cols, int output_width) {
    require(s.state == Stash::phase::forwarded, "backward_input: stash",
            s.empty() ? "empty" : "already past backward_input",
            "must hold this micro-batch's forward (call forward first)");
    require(dy_rows == s.rows && dy_cols == output_width, "backward_input: dy",
            std::to_string(dy_rows) + "x" + std::to_string(dy_cols),
            "shape must be " + std::to_string(s.rows) + "x" + std::to_string(output_width));
}

}  // namespace weft::nn
