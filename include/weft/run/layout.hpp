// A parallel layout in words: parse_layout("pp=2,dp=2,zero=1,schedule=zb-h1") and the free
// check_layout that the examples, train_gpt's --switch and the layout planner share, so a
// layout is written and refused the same way wherever a user names one. A partition's unit
// counts are separated by commas too: "pp=2,partition=3,5,zero=1" (a part without '='
// continues the value before it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/sched/schedule_list.hpp"

namespace weft::run {

// A whole layout: keys left out of a text keep these defaults, except `world`, whose 0 means
// "the world in effect" (a smaller world leaves the other ranks as spares).
struct layout {
    int pp = 1;
    int dp = 1;
    int tp = 1;
    int zero = 0;
    int chunks = 0;  // 0: the schedule's default
    std::string schedule = "1f1b";
    std::vector<int> partition;  // units per stage; empty: balanced
    int world = 0;

    // The parallel_config of this layout with `microbatches` over `world_size` ranks (its own
    // `world` when given); throws weft::error naming what cannot run.
    [[nodiscard]] parallel_config config(int microbatches, int world_size) const {
        const auto kind = sched::parse_schedule_kind(schedule);
        return parallel_config({.pp = pp, .dp = dp, .tp = tp, .zero_stage = zero, .microbatches = microbatches,
                                .chunks = chunks != 0 ? chunks : kind.default_chunks(), .schedule = kind,
                                .world_size = world != 0 ? world : world_size});
    }
};

inline constexpr std::string_view layout_keys = "pp, dp, tp, zero, schedule, chunks, partition, world";

namespace detail {

inline long long parse_layout_number(const std::string& where, const std::string& what, const std::string& value,
                                     long long low, long long high) {
    std::size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (value.empty() || used != value.size() || n < low || n > high)
        throw invalid_argument(where + ": " + what, value,
                               "must be a whole number in [" + std::to_string(low) + ", " + std::to_string(high) +
                                   "]");
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

// Parses "key=value,..." (keys: layout_keys); `where` starts every message (e.g. "--switch
// 20:pp=2"). A key given twice, an unknown key or a number out of range is a weft::error.
[[nodiscard]] inline layout parse_layout(const std::string& text, const std::string& where = "layout") {
    layout out;
    // key=value parts; a part without '=' continues the previous value (partition=3,5).
    std::vector<std::pair<std::string, std::string>> parts;
    for (const std::string& part : detail::split_on_commas(text)) {
        const std::size_t equals = part.find('=');
        if (equals != std::string::npos)
            parts.emplace_back(part.substr(0, equals), part.substr(equals + 1));
        else if (!parts.empty() && !part.empty())
            parts.back().second += "," + part;
        else
            throw invalid_argument(where + ": part", part,
                                   "must be key=value (keys: " + std::string(layout_keys) + ")");
    }
    std::vector<std::string> seen;
    for (const auto& [key, value] : parts) {
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
            throw invalid_argument(where + ": key", key, "is given twice");
        seen.push_back(key);
        const auto count = [&](long long high) {
            return static_cast<int>(detail::parse_layout_number(where, key, value, 1, high));
        };
        if (key == "pp")
            out.pp = count(1 << 16);
        else if (key == "dp")
            out.dp = count(1 << 16);
        else if (key == "tp")
            out.tp = count(1 << 16);
        else if (key == "world")
            out.world = count(1 << 16);
        else if (key == "chunks")
            out.chunks = count(1 << 10);
        else if (key == "zero")
            out.zero = static_cast<int>(detail::parse_layout_number(where, key, value, 0, 3));
        else if (key == "schedule")
            out.schedule = value;
        else if (key == "partition") {
            for (const std::string& units : detail::split_on_commas(value))
                out.partition.push_back(
                    static_cast<int>(detail::parse_layout_number(where, "partition", units, 1, 1 << 20)));
        } else {
            throw invalid_argument(where + ": key", key, "is not a layout key; valid: " + std::string(layout_keys));
        }
    }
    return out;
}

// A layout to switch to before step `step`: "STEP:key=value,..." (train_gpt's --switch).
struct layout_switch {
    std::string text;  // as given, for messages
    long long step = 0;
    layout to;
};

[[nodiscard]] inline layout_switch parse_layout_switch(const std::string& text) {
    const std::size_t colon = text.find(':');
    if (colon == std::string::npos || colon == 0)
        throw invalid_argument("--switch", text,
                               "must be STEP:key=value,... (keys: " + std::string(layout_keys) +
                                   "), e.g. 20:pp=2,dp=2");
    const std::string where = "--switch " + text;
    return {.text = text,
            .step = detail::parse_layout_number(where, "STEP", text.substr(0, colon), 0, 1LL << 40),
            .to = parse_layout(text.substr(colon + 1), where)};
}

// Whether `l` can run `model` with `microbatches` over `world_size` ranks on an engine of type
// Engine (its sizes, its schedule, its partition): the parallel_config, or a weft::error
// naming what cannot run. Nothing is built and nothing is collective, so a run checks every
// layout it will need before its first step.
template <class Engine, class ModelConfig, class EngineOptions>
parallel_config check_layout(const layout& l, int microbatches, int world_size, const ModelConfig& model,
                             EngineOptions options) {
    const parallel_config config = l.config(microbatches, world_size);
    options.partition = l.partition;
    static_cast<void>(Engine::layout_type::layout_of(config, model, options));
    return config;
}

}  // namespace weft::run
