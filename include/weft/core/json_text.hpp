// Hand-written JSON text for the renderers and logs (sched/ takes no third-party dependency):
// numbers in their shortest round-trip form and strings with JSON escapes.
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <system_error>

namespace weft::detail {

// Shortest text that reads back as the same double ("33", "0.2727272727272727").
// JSON has no inf or nan; they become null rather than an unparseable file.
[[nodiscard]] inline std::string number_text(double value) {
    if (!std::isfinite(value)) return "null";
    if (value == 0) return "0";  // also turns -0 into 0
    char buffer[64];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    if (ec != std::errc{}) return "null";
    return std::string(buffer, end);
}

// Number text with at most `decimals` digits after the point and no trailing zeros,
// for coordinates where the shortest form would be needlessly long ("12.5", "3").
[[nodiscard]] inline std::string fixed_text(double value, int decimals = 2) {
    if (!std::isfinite(value)) return "0";
    char buffer[64];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed, decimals);
    if (ec != std::errc{}) return "0";
    std::string text(buffer, end);
    if (text.find('.') != std::string::npos) {
        while (text.back() == '0') text.pop_back();
        if (text.back() == '.') text.pop_back();
    }
    if (text == "-0") text = "0";
    return text;
}

[[nodiscard]] inline std::string json_string(std::string_view text) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out = "\"";
    for (const char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    out += "\\u00";
                    out += hex[(c >> 4) & 0xf];
                    out += hex[c & 0xf];
                } else {
                    out += c;
                }
        }
    }
    out += '"';
    return out;
}

}  // namespace weft::detail
