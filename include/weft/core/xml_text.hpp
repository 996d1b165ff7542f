// XML escaping for the hand-written SVG renderers (sched's schedule pictures, io's line charts):
// in core, below both, so that neither includes the other.
#pragma once

#include <string>
#include <string_view>

namespace weft::detail {

// Text safe inside an element or a double-quoted attribute: & < > " become entities.
[[nodiscard]] inline std::string xml_text(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

}  // namespace weft::detail
