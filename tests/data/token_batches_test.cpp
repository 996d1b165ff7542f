// llm.c's batch order over a token file (contiguous windows, restarting at token 0 when
// the next would not fit) and micro-batch row ranges.
#include "weft/data/token_batches.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "weft/io/token_file.hpp"

using weft::data::batch_at;
using weft::data::micro_batch;
using weft::io::token_file;

namespace {

// A file whose token i is i: batches can be checked by index arithmetic.
token_file iota_file(std::size_t n) {
    std::vector<std::uint16_t> tokens(n);
    std::iota(tokens.begin(), tokens.end(), std::uint16_t(0));
    return token_file("iota.bin", tokens);
}

std::vector<std::int32_t> range(int first, int count) {
    std::vector<std::int32_t> out(static_cast<std::size_t>(count));
    std::iota(out.begin(), out.end(), first);
    return out;
}

}  // namespace

TEST_CASE("batches are contiguous windows with targets shifted by one") {
    const token_file file = iota_file(30);
    // B = 2, T = 3: B*T = 6, windows of 7 tokens at 0, 6, 12, 18; 24 + 7 > 30 so step 4 restarts.
    CHECK(weft::data::batches_per_epoch(file, 2, 3) == 4);
    const auto b0 = batch_at(file, 0, 2, 3);
    CHECK(b0.rows == 2);
    CHECK(b0.seq_len == 3);
    CHECK(b0.inputs == range(0, 6));
    CHECK(b0.targets == range(1, 6));
    const auto b3 = batch_at(file, 3, 2, 3);
    CHECK(b3.inputs == range(18, 6));
    CHECK(b3.targets == range(19, 6));  // the last target is token 24
    CHECK(batch_at(file, 4, 2, 3).inputs == b0.inputs);
    CHECK(batch_at(file, 7, 2, 3).targets == b3.targets);
    CHECK(batch_at(file, 4'000'000'000'001LL, 2, 3).inputs == range(6, 6));

    // Exactly B*T + 1 tokens: one batch, every step.
    const token_file tight = iota_file(7);
    CHECK(batch_at(tight, 5, 2, 3).targets == range(1, 6));
}

TEST_CASE("a file too short for one batch and bad sizes are refused") {
    const token_file file = iota_file(6);
    CHECK_THROWS_WITH(batch_at(file, 0, 2, 3), Catch::Contains("iota.bin") && Catch::Contains("holds 6 tokens") &&
                                                   Catch::Contains("7 needed"));
    CHECK_THROWS_WITH(batch_at(iota_file(30), 0, 0, 3), Catch::Contains("batch_size"));
    CHECK_THROWS_WITH(batch_at(iota_file(30), 0, 2, -1), Catch::Contains("seq_len"));
    CHECK_THROWS_WITH(batch_at(iota_file(30), -1, 2, 3), Catch::Contains("step"));
}

TEST_CASE("micro-batch j of m views rows [j*B/m, (j+1)*B/m)") {
    const token_file file = iota_file(100);
    const auto batch = batch_at(file, 1, 5, 4);  // tokens 20..40, rows of 4
    // m = 2 over 5 rows: rows [0, 2) and [2, 5).
    const auto first = micro_batch(batch, 0, 2);
    CHECK(first.rows == 2);
    CHECK(first.seq_len == 4);
    CHECK(std::vector<std::int32_t>(first.inputs.begin(), first.inputs.end()) == range(20, 8));
    const auto second = micro_batch(batch, 1, 2);
    CHECK(second.rows == 3);
    CHECK(std::vector<std::int32_t>(second.inputs.begin(), second.inputs.end()) == range(28, 12));
    CHECK(std::vector<std::int32_t>(second.targets.begin(), second.targets.end()) == range(29, 12));
    CHECK(second.inputs.data() == batch.inputs.data() + 8);  // a view, not a copy
    for (int j = 0; j < 5; ++j) CHECK(micro_batch(batch, j, 5).inputs[0] == 20 + 4 * j);

    CHECK_THROWS_WITH(micro_batch(batch, 0, 6), Catch::Contains("micro-batch count"));
    CHECK_THROWS_WITH(micro_batch(batch, 2, 2), Catch::Contains("micro-batch index"));
}
