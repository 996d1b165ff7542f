// Drawing the next token from a language model's logits, as GPT-2 samplers do: divide by a
// temperature, keep the k most likely tokens (top-k), and draw from their softmax. The draw
// is counter-based (core/rng.hpp, keyed by the seed and the position), so one seed gives
// one text, on any machine. Temperature 0 is greedy decoding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/rng.hpp"

namespace weft::nn {

struct sampling_options {
    double temperature = 1.0;  // 0: always the most likely token
    int top_k = 0;             // 0: every token
    std::uint64_t seed = 0;

    void validate() const {
        require(std::isfinite(temperature) && temperature >= 0, "temperature", temperature,
                "must be a finite number >= 0 (0: greedy)");
        require(top_k >= 0, "top_k", top_k, "must be >= 0 (0: every token)");
    }
};

// The token drawn from `logits` at generation position `position` (each position draws
// its own number).
[[nodiscard]] inline int sample_token(std::span<const float> logits, const sampling_options& options,
                                      std::uint64_t position) {
    options.validate();
    require(!logits.empty(), "logits", "empty", "must hold one value per vocabulary token");
    for (const float l : logits)
        require(std::isfinite(l), "logits", l, "must be finite (the model's weights hold NaN or infinity?)");
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    // Most likely first; ties by token id, so the order does not depend on the sort.
    const auto more_likely = [&](int a, int b) {
        return logits[std::size_t(a)] != logits[std::size_t(b)] ? logits[std::size_t(a)] > logits[std::size_t(b)]
                                                                : a < b;
    };
    if (options.temperature == 0) return *std::min_element(order.begin(), order.end(), more_likely);
    const std::size_t keep =
        options.top_k > 0 ? std::min<std::size_t>(std::size_t(options.top_k), logits.size()) : logits.size();
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(keep), order.end(), more_likely);
    order.resize(keep);
    // Softmax in double, shifted by the largest logit so that no exponential overflows.
    const double top = logits[std::size_t(order.front())];
    std::vector<double> weights(keep);
    double total = 0;
    for (std::size_t i = 0; i < keep; ++i) {
        weights[i] = std::exp((logits[std::size_t(order[i])] - top) / options.temperature);
        total += weights[i];
    }
    const double draw = static_cast<double>(rng::uniform(options.seed, "weft.sample", position)) * total;
    double running = 0;
    for (std::size_t i = 0; i < keep; ++i) {
        running += weights[i];
        if (draw < running) return order[i];
    }
    return order.back();  // rounding left the draw at the very top
}

}  // namespace weft::nn
