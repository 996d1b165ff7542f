// An optimizer's state as named tensors: how many steps it took, and each buffer it keeps
// (AdamW's exp_avg and exp_avg_sq, SGD's momentum_buffer) under PyTorch's name, laid out
// like the parameters it steps (a whole stage or a ZeRO range of it). Checkpoints write the
// tensors under "<parameter>.<state name>", layout switches move them with the parameters,
// and an optimizer takes them back through import_state, which checks every name and size.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/state_vector.hpp"

namespace weft::optim {

// One buffer of an optimizer's state, viewed where the optimizer keeps it.
template <class Scalar>
struct state_tensor_view {
    std::string_view name;
    std::span<const Scalar> values;
};

// One buffer of an optimizer's state, owned: what export_state gives and import_state takes.
template <class Scalar>
struct state_tensor {
    std::string name;
    state_vector<Scalar> values;
    friend bool operator==(const state_tensor&, const state_tensor&) = default;
};

template <class Scalar>
struct optimizer_state {
    std::uint64_t steps = 0;  // steps taken: AdamW's bias correction and SGD's first step depend on it
    std::vector<state_tensor<Scalar>> tensors;

    // The tensor called `name`; weft::error naming the ones there are otherwise.
    [[nodiscard]] const state_tensor<Scalar>& find(std::string_view name) const {
        for (const auto& t : tensors)
            if (t.name == name) return t;
        std::string names;
        for (const auto& t : tensors) names += (names.empty() ? "" : ", ") + t.name;
        throw invalid_argument("optimizer state tensor", name,
                               "is not in this state (it holds: " + (names.empty() ? "none" : names) + ")");
    }
    friend bool operator==(const optimizer_state&, const optimizer_state&) = default;
};

// A copy of an optimizer's views, as the value export_state returns.
template <class Scalar, class Views>
[[nodiscard]] optimizer_state<Scalar> copy_state(std::uint64_t steps, const Views& views) {
    optimizer_state<Scalar> state{steps, {}};
    for (const state_tensor_view<Scalar>& view : views)
        state.tensors.push_back({std::string(view.name), state_vector<Scalar>(view.values.begin(), view.values.end())});
    return state;
}

namespace detail {

// Checks that `state` holds exactly the tensors `names` (in any order), all of one size
// (empty before the first step), and returns them in the order of `names`.
template <class Scalar, std::size_t N>
[[nodiscard]] std::array<state_vector<Scalar>, N> take_state_tensors(
    std::string_view optimizer, optimizer_state<Scalar>&& state,
    const std::array<std::string_view, N>& names) {
    auto list = [](const auto& items, auto name_of) {
        std::string text;
        for (const auto& item : items) text += (text.empty() ? "" : ", ") + std::string(name_of(item));
        return text.empty() ? std::string("none") : text;
    };
    const std::string expected = list(names, [](std::string_view n) { return n; });
    for (const auto& t : state.tensors)
        require(std::find(names.begin(), names.end(), t.name) != names.end(), std::string(optimizer) + " state tensor",
                t.name, "is not part of " + std::string(optimizer) + "'s state (valid: " + expected + ")");
    std::array<state_vector<Scalar>, N> out;
    for (std::size_t i = 0; i < N; ++i) {
        const auto it = std::find_if(state.tensors.begin(), state.tensors.end(),
                                     [&](const auto& t) { return t.name == names[i]; });
        require(it != state.tensors.end(), std::string(optimizer) + " state",
                list(state.tensors, [](const auto& t) { return std::string_view(t.name); }),
                "must hold " + expected + " (" + std::string(names[i]) + " is missing)");
        require(std::count_if(state.tensors.begin(), state.tensors.end(),
                              [&](const auto& t) { return t.name == names[i]; }) == 1,
                std::string(optimizer) + " state tensor", names[i], "appears more than once");
        out[i] = std::move(it->values);
        require(out[i].size() == out[0].size(), std::string(optimizer) + " state tensor " + std::string(names[i]) +
                                                    " size", out[i].size(),
                "must equal " + std::string(names[0]) + "'s size " + std::to_string(out[0].size()));
    }
    return out;
}

}  // namespace detail

}  // namespace weft::optim
