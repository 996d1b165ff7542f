// Command-line checks the example programs share, with messages that say what is valid
// (CLI11's own PositiveNumber prints the whole double range and lets "inf" through).
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstddef>
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

// Makes every integer option of `app` (and of its subcommands) take decimal digits only: CLI11
// reads integers as C's strtoll does with base 0, so "--steps 010" ran 8 steps and "0x3" 3.
// An optional sign (none below zero for an unsigned one), then digits; leading zeros are
// dropped ("010" is 10). Call it once the options are all added (a transform runs before the
// option's other checks).
inline void integers_in_decimal(CLI::App& app) {
    for (CLI::Option* option : app.get_options()) {
        const std::string type = option->get_type_name();
        const bool is_unsigned = type.rfind("UINT", 0) == 0;
        if (!is_unsigned && type.rfind("INT", 0) != 0) continue;
        option->transform(CLI::Validator(
            [is_unsigned](std::string& text) -> std::string {
                // (An unsigned one would wrap "-1" round to its largest value.)
                if (is_unsigned && !text.empty() && text[0] == '-')
                    return "value " + text + " is invalid: must be a whole number >= 0";
                std::size_t digits = text.empty() || (text[0] != '+' && text[0] != '-') ? 0 : 1;
                const std::size_t sign = digits;
                if (digits == text.size()) return "value " + text + " is invalid: must be a whole number in decimal";
                for (std::size_t i = digits; i < text.size(); ++i)
                    if (text[i] < '0' || text[i] > '9')
                        return "value " + text + " is invalid: must be a whole number in decimal digits";
                while (digits + 1 < text.size() && text[digits] == '0') ++digits;  // keep the last digit
                text.erase(sign, digits - sign);
                return {};
            },
            ""));
    }
    for (CLI::App* sub : app.get_subcommands({})) integers_in_decimal(*sub);
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
