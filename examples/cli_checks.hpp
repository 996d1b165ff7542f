// Command-line checks the example programs share, with messages that say what is valid
// (CLI11's own PositiveNumber prints the whole double range and lets "inf" through).
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <string>

namespace weft_examples {

// A finite number above `minimum` (or equal to it when `inclusive`): "inf" and "nan" are refused.
[[nodiscard]] inline CLI::Validator finite_at_least(double minimum, bool inclusive) {
    char bound[32];
    std::snprintf(bound, sizeof bound, "%g", minimum);
    const std::string expected = std::string("must be a finite number ") + (inclusive ? ">= " : "> ") + bound;
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) ||
                !(inclusive ? value >= minimum : value > minimum))
                return "value " + text + " is invalid: " + expected;
            return {};
        },
        "NUMBER");
}

// An integer in [low, high], worded as the other checks are.
[[nodiscard]] inline CLI::Validator int_in(long long low, long long high) {
    const std::string expected = "must be an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            long long value = 0;
            if (!CLI::detail::lexical_cast(text, value) || value < low || value > high)
                return "value " + text + " is invalid: " + expected;
            return {};
        },
        "INT");
}

}  // namespace weft_examples
