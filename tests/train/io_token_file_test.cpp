// llm.c token files and batches: the exact bytes of the format, llm.c's batch order
// (contiguous windows, restarting at token 0 when the next would not fit), micro-batch
// row ranges, and clear errors for files that are not what their header says.
#include "weft/train/token_batches.hpp"
#include "weft/train/token_file.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using weft::train::batch_at;
using weft::train::micro_batch;
using weft::train::read_token_file;
using weft::train::token_file;
using weft::train::write_token_file;

using weft_test::scratch_dir;

namespace {

std::vector<char> read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

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

TEST_CASE("a token file has llm.c's exact layout and reads back") {
    scratch_dir dir("tokens_layout");
    const fs::path path = dir.path / "train.bin";
    const std::vector<std::uint16_t> tokens = {0, 1, 50256, 65535, 258};
    write_token_file(path, tokens);
    const auto bytes = read_bytes(path);
    REQUIRE(bytes.size() == 1024 + 2 * tokens.size());
    std::int32_t header[256];
    std::memcpy(header, bytes.data(), sizeof header);
    CHECK(header[0] == 20240520);
    CHECK(header[1] == 1);
    CHECK(header[2] == 5);
    CHECK(std::all_of(header + 3, header + 256, [](std::int32_t h) { return h == 0; }));
    CHECK(static_cast<unsigned char>(bytes[1024 + 4]) == 0x50);  // 50256 = 0xc450, little-endian
    CHECK(static_cast<unsigned char>(bytes[1024 + 5]) == 0xc4);

    const token_file file = read_token_file(path);
    CHECK(std::vector<std::uint16_t>(file.tokens().begin(), file.tokens().end()) == tokens);
    CHECK(file.size() == 5);
    CHECK(file.path() == path);
}

TEST_CASE("token files that are not what their header says are refused") {
    scratch_dir dir("tokens_errors");
    const fs::path path = dir.path / "data.bin";
    write_token_file(path, std::vector<std::uint16_t>{1, 2, 3, 4});
    const auto good = read_bytes(path);
    const auto with_int = [&](int index, std::int32_t value) {
        auto bytes = good;
        std::memcpy(bytes.data() + 4 * index, &value, 4);
        write_bytes(path, bytes);
    };

    with_int(0, 20240522);
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains(path.string()) && Catch::Contains("magic 20240522"));
    with_int(1, 2);
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("version 2"));
    with_int(2, 6);
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("truncated") && Catch::Contains("announces 6 tokens"));
    with_int(2, 3);
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("token count 3 needs 6"));
    with_int(2, -1);
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("negative token count"));

    write_bytes(path, std::vector<char>(good.begin(), good.end() - 1));
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("truncated"));
    write_bytes(path, std::vector<char>(good.begin(), good.begin() + 100));
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("shorter than the 1024-byte header"));
    CHECK_THROWS_WITH(read_token_file(dir.path / "none.bin"), Catch::Contains("does not exist"));
}

TEST_CASE("batches are contiguous windows with targets shifted by one") {
    const token_file file = iota_file(30);
    // B = 2, T = 3: B*T = 6, windows of 7 tokens at 0, 6, 12, 18; 24 + 7 > 30 so step 4 restarts.
    CHECK(weft::train::batches_per_epoch(file, 2, 3) == 4);
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
