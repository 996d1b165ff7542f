// llm.c token files: the exact bytes of the format, and clear errors for files that are
// not what their header says.
#include "weft/io/token_file.hpp"

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
using weft::io::read_token_file;
using weft::io::token_file;
using weft::io::write_token_file;

using weft_test::scratch_dir;

namespace {

std::vector<char> read_chars(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_chars(const fs::path& path, const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

TEST_CASE("a token file has llm.c's exact layout and reads back") {
    scratch_dir dir("tokens_layout");
    const fs::path path = dir.path / "train.bin";
    const std::vector<std::uint16_t> tokens = {0, 1, 50256, 65535, 258};
    write_token_file(path, tokens);
    const auto bytes = read_chars(path);
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
    const auto good = read_chars(path);
    const auto with_int = [&](int index, std::int32_t value) {
        auto bytes = good;
        std::memcpy(bytes.data() + 4 * index, &value, 4);
        write_chars(path, bytes);
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

    write_chars(path, std::vector<char>(good.begin(), good.end() - 1));
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("truncated"));
    write_chars(path, std::vector<char>(good.begin(), good.begin() + 100));
    CHECK_THROWS_WITH(read_token_file(path), Catch::Contains("shorter than the 1024-byte header"));
    CHECK_THROWS_WITH(read_token_file(dir.path / "none.bin"), Catch::Contains("does not exist"));
}
