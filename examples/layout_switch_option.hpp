// train_gpt's --switch STEP:key=value,... : a layout switch before step STEP. A switch names
// the whole new layout: keys left out take train_gpt's defaults (pp, dp, tp 1, ZeRO 0, the
// 1f1b schedule, the schedule's default chunks, the balanced partition), except `world`,
// which keeps the value it had. A partition's unit counts are separated by commas too:
// "20:pp=2,partition=3,5,zero=1" (a part without '=' continues the value before it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft_examples {

struct layout_switch {
    std::string text;    // as given, for messages
    long long step = 0;  // the switch happens before this step
    int pp = 1;
    int dp = 1;
    int tp = 1;
    int zero = 0;
    int chunks = 0;  // 0: the schedule's default
    std::string schedule = "1f1b";
    std::vector<int> partition;  // empty: balanced
    int world = 0;               // 0: the world size in effect before the switch
};

namespace detail {

inline constexpr std::string_view switch_keys = "pp, dp, tp, zero, schedule, chunks, partition, world";

inline long long parse_switch_number(const std::string& text, const std::string& what, const std::string& value,
                                     long long low, long long high) {
    std::size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (value.empty() || used != value.size() || n < low || n > high)
        throw weft::invalid_argument(
            "--switch " + text + ": " + what, value,
            "must be a whole number in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
    return n;
}

// The parts of `text` between commas (one empty part for an empty text).
inline std::vector<std::string> split_on_commas(const std::string& text) {
    std::vector<std::string> parts;
    for (std::size_t at = 0; at <= text.size();) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        parts.push_back(text.substr(at, comma - at));
        at = comma + 1;
    }
    return parts;
}

}  // namespace detail

// Parses one --switch value; a weft::invalid_argument naming the key otherwise.
[[nodiscard]] inline layout_switch parse_layout_switch(const std::string& text) {
    layout_switch s;
    s.text = text;
    const std::size_t colon = text.find(':');
    if (colon == std::string::npos || colon == 0)
        throw weft::invalid_argument(
            "--switch", text,
            "must be STEP:key=value,... (keys: " + std::string(detail::switch_keys) + "), e.g. 20:pp=2,dp=2");
    s.step = detail::parse_switch_number(text, "STEP", text.substr(0, colon), 0, 1LL << 40);
    // key=value parts; a part without '=' continues the previous value (partition=3,5).
    std::vector<std::pair<std::string, std::string>> parts;
    for (const std::string& part : detail::split_on_commas(text.substr(colon + 1))) {
        const std::size_t equals = part.find('=');
        if (equals != std::string::npos)
            parts.emplace_back(part.substr(0, equals), part.substr(equals + 1));
        else if (!parts.empty() && !part.empty())
            parts.back().second += "," + part;
        else
            throw weft::invalid_argument("--switch " + text + ": part", part,
                                         "must be key=value (keys: " + std::string(detail::switch_keys) + ")");
    }
    std::vector<std::string> seen;
    for (const auto& [key, value] : parts) {
        for (const auto& k : seen)
            if (k == key) throw weft::invalid_argument("--switch " + text + ": key", key, "is given twice");
        seen.push_back(key);
        const auto count = [&](long long high) {
            return static_cast<int>(detail::parse_switch_number(text, key, value, 1, high));
        };
        if (key == "pp")
            s.pp = count(1 << 16);
        else if (key == "dp")
            s.dp = count(1 << 16);
        else if (key == "tp")
            s.tp = count(1 << 16);
        else if (key == "world")
            s.world = count(1 << 16);
        else if (key == "chunks")
            s.chunks = count(1 << 10);
        else if (key == "zero")
            s.zero = static_cast<int>(detail::parse_switch_number(text, key, value, 0, 3));
        else if (key == "schedule")
            s.schedule = value;
        else if (key == "partition") {
            for (const std::string& count : detail::split_on_commas(value))
                s.partition.push_back(
                    static_cast<int>(detail::parse_switch_number(text, "partition", count, 1, 1 << 20)));
        } else {
            throw weft::invalid_argument("--switch " + text + ": key", key,
                                         "is not a layout key; valid: " + std::string(detail::switch_keys));
        }
    }
    return s;
}

}  // namespace weft_examples
