// Which compute action a stage runner asks its backend for: what a backend that records
// actions (exec::cuda's CUDA graphs, weft/exec/cuda/action_graphs.hpp) keys its recordings
// by, and how the runner hands an action to any backend (run_action): a backend without
// recordings just runs it.
#pragma once

#include <compare>
#include <string>
#include <utility>

namespace weft::exec {

enum class action_part : char {
    forward = 'F',
    backward = 'B',        // I then W
    backward_input = 'I',
    backward_weight = 'W',
};

struct action_key {
    int stage = 0;
    action_part part = action_part::forward;
    int microbatch = 0;
    int rows = 0;  // the micro-batch's batch rows: an evaluation with other rows is another action
    auto operator<=>(const action_key&) const = default;
};

[[nodiscard]] inline std::string to_string(const action_key& key) {
    return std::string(1, static_cast<char>(key.part)) + " of stage " + std::to_string(key.stage) +
           ", micro-batch " + std::to_string(key.microbatch) + " (" + std::to_string(key.rows) + " rows)";
}

// A backend that records actions: run_action(key, action) and run_action(key, input, action),
// forget_actions(stage) for a stage whose runner is new, and forget_all_actions() for a new
// layout.
template <class Backend>
concept records_actions = requires(Backend& b, int stage) {
    b.forget_actions(stage);
    b.forget_all_actions();
};

// Forgets what `backend` recorded of `stage`'s actions (a runner made for it anew).
template <class Backend>
void forget_actions(Backend& backend, int stage) {
    if constexpr (records_actions<Backend>) backend.forget_actions(stage);
}

// Forgets everything `backend` recorded (a layout switch: the old stages are gone).
template <class Backend>
void forget_all_actions(Backend& backend) {
    if constexpr (records_actions<Backend>) backend.forget_all_actions();
}

// Runs `action()` as action `key` on `backend`.
template <class Backend, class Action>
auto run_action(Backend& backend, const action_key& key, Action&& action) {
    if constexpr (records_actions<Backend>)
        return backend.run_action(key, std::forward<Action>(action));
    else
        return std::forward<Action>(action)();
}

// Runs `action(input)` as action `key` on `backend`. A recording backend passes its own copy
// of `input` (a view of a buffer whose address its recording keeps); the rest pass `input`.
template <class Backend, class Matrix, class Action>
auto run_action(Backend& backend, const action_key& key, Matrix&& input, Action&& action) {
    if constexpr (records_actions<Backend>)
        return backend.run_action(key, std::forward<Matrix>(input), std::forward<Action>(action));
    else
        return std::forward<Action>(action)(std::forward<Matrix>(input));
}

}  // namespace weft::exec
