// The host's grouping of a batch's rows by token for the device's embedding backward: every
// held token's rows, ascending, in ascending token order; other ranks' tokens left out; a
// fixed packed size; and sums over the groups equal to the per-row scan they replace.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/exec/token_groups.hpp"

using weft::exec::group_rows_by_token;
using weft::exec::token_groups_view;

namespace {

token_groups_view view_of(const std::vector<std::int32_t>& packed, std::size_t tokens) {
    return {.tokens = static_cast<int>(tokens), .packed = packed.data()};
}

}  // namespace

TEST_CASE("rows are grouped by token, ascending within each group", "[exec][token_groups]") {
    const std::vector<std::int32_t> tokens{5, 2, 5, 0, 2, 5, 7};
    const auto packed = group_rows_by_token(tokens, 0, 8);
    REQUIRE(packed.size() == 3 * tokens.size() + 2);
    const auto groups = view_of(packed, tokens.size());
    REQUIRE(groups.groups() == 4);
    const std::vector<std::int32_t> want_tokens{0, 2, 5, 7};
    const std::vector<std::vector<std::int32_t>> want_rows{{3}, {1, 4}, {0, 2, 5}, {6}};
    for (int g = 0; g < groups.groups(); ++g) {
        INFO("group " << g);
        CHECK(groups.token(g) == want_tokens[std::size_t(g)]);
        std::vector<std::int32_t> rows;
        for (int i = groups.start(g); i < groups.start(g + 1); ++i) rows.push_back(groups.row(i));
        CHECK(rows == want_rows[std::size_t(g)]);
    }
    CHECK(groups.start(groups.groups()) == 7);
}

TEST_CASE("a rank's slice of the vocabulary groups only its own tokens", "[exec][token_groups]") {
    const std::vector<std::int32_t> tokens{9, 3, 4, 9, 12, 3, 5};
    const auto packed = group_rows_by_token(tokens, 3, 3);  // rows [3, 6)
    const auto groups = view_of(packed, tokens.size());
    REQUIRE(groups.groups() == 3);
    CHECK(groups.token(0) == 3);
    CHECK(groups.token(1) == 4);
    CHECK(groups.token(2) == 5);
    CHECK(groups.start(3) == 4);  // rows 1, 5 (token 3), 2 (token 4), 6 (token 5)
    CHECK(groups.row(0) == 1);
    CHECK(groups.row(1) == 5);
    CHECK(groups.row(2) == 2);
    CHECK(groups.row(3) == 6);
    // A slice holding none of them, and a rank holding no rows: no groups, the same size.
    for (const auto& none : {group_rows_by_token(tokens, 20, 5), group_rows_by_token(tokens, 0, 0)}) {
        CHECK(none.size() == 3 * tokens.size() + 2);
        CHECK(view_of(none, tokens.size()).groups() == 0);
    }
}

TEST_CASE("sums over the groups equal the scan of every row for every vocabulary row", "[exec][token_groups]") {
    // What the device computes, on the host: each held row's sum of its tokens' values, in
    // ascending row order, against the scan it replaces (bit for bit: the same order).
    const int vocab = 50, first = 10, held = 25;
    std::vector<std::int32_t> tokens;
    std::vector<float> values;
    for (int r = 0; r < 997; ++r) {
        tokens.push_back((r * 37 + r / 7) % vocab);
        values.push_back(1.0f / float(r + 3));
    }
    const auto packed = group_rows_by_token(tokens, first, held);
    const auto groups = view_of(packed, tokens.size());
    std::vector<float> grouped(std::size_t(held), 0.0f), scanned(std::size_t(held), 0.0f);
    for (int g = 0; g < groups.groups(); ++g) {
        float sum = 0;
        for (int i = groups.start(g); i < groups.start(g + 1); ++i) sum += values[std::size_t(groups.row(i))];
        grouped[std::size_t(groups.token(g) - first)] += sum;
    }
    for (int v = 0; v < held; ++v) {
        float sum = 0;
        for (std::size_t r = 0; r < tokens.size(); ++r)
            if (tokens[r] == first + v) sum += values[r];
        scanned[std::size_t(v)] += sum;
    }
    CHECK(grouped == scanned);
}

TEST_CASE("bad slices are refused with the parameter named", "[exec][token_groups]") {
    const std::vector<std::int32_t> tokens{1, 2};
    CHECK_THROWS_WITH(group_rows_by_token(tokens, -1, 4),
                      Catch::Contains("group_rows_by_token: first_row") && Catch::Contains("-1"));
    CHECK_THROWS_WITH(group_rows_by_token(tokens, 0, -4),
                      Catch::Contains("group_rows_by_token: held_rows") && Catch::Contains("-4"));
}
