// A size in bytes as a user writes it: "2GiB", "512MiB", "1.5GB", "4096" (bytes). Binary
// units (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB, MB, GB, TB) of 1000;
// weft-plan's --memory-budget reads it.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "weft/core/error.hpp"

namespace weft::plan {

// The bytes `text` names; weft::error naming `flag` when it names none (or not > 0).
[[nodiscard]] inline long long parse_byte_size(const std::string& text, std::string_view flag = "memory_budget") {
    const std::pair<std::string_view, double> units[] = {
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"kB", 1e3},     {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
        {"TB", 1e12},    {"B", 1.0}};
    std::string_view number = text;
    double scale = 1;
    for (const auto& [suffix, factor] : units)
        if (number.size() > suffix.size() && number.ends_with(suffix)) {
            number.remove_suffix(suffix.size());
            scale = factor;
            break;
        }
    while (!number.empty() && number.back() == ' ') number.remove_suffix(1);
    const std::string digits(number);
    char* end = nullptr;
    const double value = digits.empty() ? 0.0 : std::strtod(digits.c_str(), &end);
    const double bytes = value * scale;
    if (digits.empty() || end != digits.c_str() + digits.size() || !std::isfinite(bytes) || bytes < 1 ||
        bytes > 9.0e18)
        throw invalid_argument(flag, text,
                               "must be a size in bytes > 0, e.g. 2GiB, 512MiB, 1.5GB or 4096 (bytes)");
    return static_cast<long long>(bytes);
}

}  // namespace weft::plan
