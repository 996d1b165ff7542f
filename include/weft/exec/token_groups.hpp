// A batch's rows grouped by their token id, built on the host for a device's embedding
// backward (exec::cuda: kernels/embedding.cuh). The gradient of embedding row v is the sum
// of the output-gradient rows whose token is v. Scanning every token for every vocabulary
// row costs vocab x tokens reads (GPT-2 at batch 16 x 1024: 50,304 x 16,384); with the rows
// grouped, one device block per token that occurs sums its rows, and the work is the rows'
// size. The token ids are host data anyway (they are uploaded each step), and a counting
// sort over the held rows costs tokens + vocabulary steps.
//
// Within a group the rows are ascending, the order the CPU backend sums them in, so the
// device's fp32 sums are bit-reproducible. Groups are in ascending token order.
//
// The packed form has a fixed size for a fixed number of tokens (3 * tokens + 2 int32), so
// that a CUDA graph's upload of it (exec::cuda's action graphs) keeps its size from step to
// step however many distinct tokens a step has:
//   [0]                             groups: G, the distinct tokens in the held rows
//   [1, 1 + tokens)                 group_token[g], g < G (the rest unused)
//   [1 + tokens, 2 + 2 * tokens)    group_start[g], g <= G: where group g's rows start in order
//   [2 + 2 * tokens, 2 + 3 * tokens) order: the rows (token indices) of each group in turn
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::exec {

struct token_groups_view {
    int tokens = 0;  // the batch's token count (the packing's size parameter)
    const std::int32_t* packed = nullptr;

    [[nodiscard]] int groups() const { return packed[0]; }
    [[nodiscard]] std::int32_t token(int g) const { return packed[1 + g]; }
    [[nodiscard]] std::int32_t start(int g) const { return packed[1 + tokens + g]; }
    [[nodiscard]] std::int32_t row(int i) const { return packed[2 + 2 * std::ptrdiff_t(tokens) + i]; }
};

// The packed size for `tokens` tokens.
[[nodiscard]] constexpr std::size_t token_groups_size(std::size_t tokens) { return 3 * tokens + 2; }

// The rows of `tokens` whose id is in [first_row, first_row + held_rows), grouped by id
// (packed as above). Ids outside the range (another rank's vocabulary slice) are left out.
[[nodiscard]] inline std::vector<std::int32_t> group_rows_by_token(std::span<const std::int32_t> tokens,
                                                                   int first_row, int held_rows) {
    require(first_row >= 0, "group_rows_by_token: first_row", first_row, "must be a vocabulary row (>= 0)");
    require(held_rows >= 0, "group_rows_by_token: held_rows", held_rows, "must be >= 0");
    require(tokens.size() <= std::size_t(std::numeric_limits<std::int32_t>::max() / 3),
            "group_rows_by_token: tokens", tokens.size(), "must be at most (2^31 - 1) / 3");
    const auto n = static_cast<std::ptrdiff_t>(tokens.size());
    std::vector<std::int32_t> packed(token_groups_size(tokens.size()), 0);
    std::int32_t* group_token = packed.data() + 1;
    std::int32_t* group_start = packed.data() + 1 + n;
    std::int32_t* order = packed.data() + 2 + 2 * n;
    // Counting sort: how many rows each held id has, then where each id's rows start.
    const auto held = [&](std::int32_t id) { return id >= first_row && id - first_row < held_rows; };
    std::vector<std::int32_t> next(static_cast<std::size_t>(held_rows) + 1, 0);
    for (const std::int32_t id : tokens)
        if (held(id)) ++next[std::size_t(id - first_row) + 1];
    int groups = 0;
    for (int v = 0; v < held_rows; ++v) {
        if (next[std::size_t(v) + 1] > 0) {
            group_token[groups] = first_row + v;
            group_start[groups] = next[std::size_t(v)];
            ++groups;
        }
        next[std::size_t(v) + 1] += next[std::size_t(v)];
    }
    group_start[groups] = next[std::size_t(held_rows)];
    packed[0] = groups;
    // Rows in ascending order land in ascending order within their id's group.
    for (std::ptrdiff_t r = 0; r < n; ++r)
        if (const std::int32_t id = tokens[std::size_t(r)]; held(id))
            order[next[std::size_t(id - first_row)]++] = static_cast<std::int32_t>(r);
    return packed;
}

}  // namespace weft::exec
