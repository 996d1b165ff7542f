// The action IR: one step of a pipeline schedule on one rank, {kind, stage, microbatch}.
// The text form is torch.distributed.pipelining's (`2F0`, `1I3`, `3SEND_F1`, `0REDUCE_GRAD`)
// so schedules can be exchanged with PyTorch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft::sched {

// The order of the first eight kinds is relied on by detail tables (they index by kind).
enum class action_kind : std::uint8_t {
    F,            // forward
    B,            // full backward (input and weight gradients)
    I,            // backward for inputs only
    W,            // backward for weights only
    SEND_F,       // stage = the sending stage s; the output goes to s + 1
    RECV_F,       // stage = the receiving stage s + 1
    SEND_B,       // stage = the sending stage s; the input gradient goes to s - 1
    RECV_B,       // stage = the receiving stage s - 1
    REDUCE_GRAD,  // start the data-parallel gradient reduction of a stage
    UNSHARD,
    RESHARD,
    OVERLAP_F_B,  // DualPipe-style overlapped forward/backward pair
};

inline constexpr std::array<std::string_view, 12> action_kind_names{
    "F",      "B",      "I",           "W",       "SEND_F",  "RECV_F",
    "SEND_B", "RECV_B", "REDUCE_GRAD", "UNSHARD", "RESHARD", "OVERLAP_F_B"};

[[nodiscard]] constexpr bool is_known(action_kind kind) {
    return static_cast<std::size_t>(kind) < action_kind_names.size();
}

[[nodiscard]] constexpr std::string_view to_string(action_kind kind) {
    return is_known(kind) ? action_kind_names[static_cast<std::size_t>(kind)] : "?";
}

[[nodiscard]] constexpr bool is_compute(action_kind kind) {
    return kind == action_kind::F || kind == action_kind::B || kind == action_kind::I ||
           kind == action_kind::W || kind == action_kind::OVERLAP_F_B;
}

[[nodiscard]] constexpr bool is_comm(action_kind kind) {
    return kind == action_kind::SEND_F || kind == action_kind::RECV_F ||
           kind == action_kind::SEND_B || kind == action_kind::RECV_B;
}

// Stage-wide actions act on all micro-batches at once and carry none.
[[nodiscard]] constexpr bool has_microbatch(action_kind kind) {
    return kind != action_kind::REDUCE_GRAD && kind != action_kind::UNSHARD &&
           kind != action_kind::RESHARD;
}

struct action {
    action_kind kind{};
    int stage = 0;
    int microbatch = -1;  // -1 = none (REDUCE_GRAD, UNSHARD, RESHARD)
    // OVERLAP_F_B only: stage/microbatch above are the forward's; these describe the
    // backward (kind B or I). Defaulted so that `{kind, stage, microbatch}` still works.
    action_kind overlap_backward_kind = action_kind::B;
    int overlap_stage = -1;
    int overlap_microbatch = -1;
    friend constexpr bool operator==(const action&, const action&) = default;
};

// The forward half of an OVERLAP_F_B: {F, stage, microbatch}.
[[nodiscard]] constexpr action forward_part(const action& overlapped) {
    return action{action_kind::F, overlapped.stage, overlapped.microbatch};
}

// The backward half of an OVERLAP_F_B: {B or I, overlap_stage, overlap_microbatch}.
[[nodiscard]] constexpr action backward_part(const action& overlapped) {
    return action{overlapped.overlap_backward_kind, overlapped.overlap_stage,
                  overlapped.overlap_microbatch};
}

namespace detail {

// std::to_string is not constexpr in C++20.
[[nodiscard]] constexpr std::string int_text(long long value) {
    if (value == 0) return "0";
    const bool negative = value < 0;
    // Work on the negative side so that the minimum value does not overflow.
    long long rest = negative ? value : -value;
    std::string digits;
    while (rest != 0) {
        digits.insert(digits.begin(), static_cast<char>('0' - rest % 10));
        rest /= 10;
    }
    if (negative) digits.insert(digits.begin(), '-');
    return digits;
}

inline constexpr std::string_view action_text_form =
    "expected <stage><kind><microbatch>, e.g. \"2F0\", \"1I3\", \"3SEND_F1\", or "
    "<stage><kind> for the stage-wide kinds, e.g. \"0REDUCE_GRAD\"; kind is one of F, B, I, W, "
    "SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD, UNSHARD, RESHARD; an overlapped pair is "
    "written (<forward>;<backward>)OVERLAP_F_B, e.g. \"(0F7;7B3)OVERLAP_F_B\"";

[[noreturn]] inline void throw_bad_action(std::string_view text, std::string_view reason) {
    throw invalid_argument("action", text,
                           std::string(reason) + "; " + std::string(action_text_form));
}

// Reads a run of decimal digits at `at`; -1 if there is none. Numbers with more than
// nine digits are rejected so that the value always fits an int.
// `whole` is the full text being parsed, quoted in errors.
constexpr int read_number(std::string_view text, std::size_t& at, std::string_view whole) {
    const std::size_t begin = at;
    long long value = 0;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
        if (at - begin == 9) throw_bad_action(whole, "number has more than 9 digits");
        value = value * 10 + (text[at] - '0');
        ++at;
    }
    return at == begin ? -1 : static_cast<int>(value);
}

}  // namespace detail

namespace detail {

[[nodiscard]] constexpr std::string plain_action_text(const action& a) {
    std::string text = int_text(a.stage);
    text.append(to_string(a.kind));
    if (a.microbatch >= 0) text.append(int_text(a.microbatch));
    return text;
}

}  // namespace detail

// An OVERLAP_F_B is written as PyTorch writes it: `(0F7;7B3)OVERLAP_F_B`.
[[nodiscard]] constexpr std::string to_string(const action& a) {
    if (a.kind != action_kind::OVERLAP_F_B) return detail::plain_action_text(a);
    std::string text = "(";
    text.append(detail::plain_action_text(forward_part(a)));
    text.append(";");
    text.append(detail::plain_action_text(backward_part(a)));
    text.append(")OVERLAP_F_B");
    return text;
}

// Pairs a forward with a backward (B or I) that run overlapped, as in DualPipe.
[[nodiscard]] constexpr action overlap_f_b(const action& forward, const action& backward) {
    if (forward.kind != action_kind::F)
        throw invalid_argument("overlap_f_b forward", to_string(forward),
                               "the first action of an OVERLAP_F_B must be an F");
    if (backward.kind != action_kind::B && backward.kind != action_kind::I)
        throw invalid_argument("overlap_f_b backward", to_string(backward),
                               "the second action of an OVERLAP_F_B must be a B or an I");
    return action{action_kind::OVERLAP_F_B, forward.stage,    forward.microbatch,
                  backward.kind,           backward.stage,   backward.microbatch};
}

namespace detail {

[[nodiscard]] constexpr action parse_plain_action(std::string_view text, std::string_view whole) {
    std::size_t at = 0;
    const int stage = read_number(text, at, whole);
    if (stage < 0) throw_bad_action(whole, "it does not start with a stage number");
    const std::size_t kind_begin = at;
    while (at < text.size() && !(text[at] >= '0' && text[at] <= '9')) ++at;
    const std::string_view kind_text = text.substr(kind_begin, at - kind_begin);
    std::size_t kind_index = 0;
    while (kind_index < action_kind_names.size() && action_kind_names[kind_index] != kind_text)
        ++kind_index;
    if (kind_index == action_kind_names.size())
        throw_bad_action(whole, "\"" + std::string(kind_text) + "\" is not an action kind");
    const auto kind = static_cast<action_kind>(kind_index);
    if (kind == action_kind::OVERLAP_F_B)
        throw_bad_action(whole, "OVERLAP_F_B names its two parts before it");
    const int microbatch = read_number(text, at, whole);
    if (at != text.size()) throw_bad_action(whole, "unexpected text after the microbatch");
    if (has_microbatch(kind) && microbatch < 0)
        throw_bad_action(whole, "a " + std::string(kind_text) + " action needs a microbatch");
    if (!has_microbatch(kind) && microbatch >= 0)
        throw_bad_action(whole, "a " + std::string(kind_text) + " action takes no microbatch");
    return action{kind, stage, microbatch};
}

[[nodiscard]] constexpr action parse_overlap(std::string_view text) {
    constexpr std::string_view suffix = ")OVERLAP_F_B";
    const std::size_t close = text.find(')');
    if (close == std::string_view::npos || text.substr(close) != suffix)
        throw_bad_action(text, "an overlapped pair must end in \")OVERLAP_F_B\"");
    const std::string_view inside = text.substr(1, close - 1);
    const std::size_t semicolon = inside.find(';');
    if (semicolon == std::string_view::npos)
        throw_bad_action(text, "the two parts of an OVERLAP_F_B are separated by ';'");
    const action forward = parse_plain_action(inside.substr(0, semicolon), text);
    const action backward = parse_plain_action(inside.substr(semicolon + 1), text);
    if (forward.kind != action_kind::F)
        throw_bad_action(text, "the first part of an OVERLAP_F_B must be an F");
    if (backward.kind != action_kind::B && backward.kind != action_kind::I)
        throw_bad_action(text, "the second part of an OVERLAP_F_B must be a B or an I");
    return overlap_f_b(forward, backward);
}

}  // namespace detail

[[nodiscard]] constexpr action parse_action(std::string_view text) {
    if (!text.empty() && text.front() == '(') return detail::parse_overlap(text);
    return detail::parse_plain_action(text, text);
}

}  // namespace weft::sched
