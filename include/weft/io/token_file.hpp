// Token data in llm.c's .bin format, so datasets prepared for llm.c train weft too:
// a header of 256 little-endian int32 (magic 20240520, version 1, token count, the
// rest zero), then the tokens as little-endian uint16.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/atomic_file.hpp"

namespace weft::io {

static_assert(std::endian::native == std::endian::little,
              "weft's token files are read and written as is: a big-endian host would need byte swaps");

inline constexpr std::int32_t token_file_magic = 20240520;
inline constexpr std::int32_t token_file_version = 1;
inline constexpr std::size_t token_file_header_ints = 256;
inline constexpr std::size_t token_file_header_bytes = token_file_header_ints * sizeof(std::int32_t);

// The tokens of one .bin file, held in memory.
class token_file {
public:
    token_file() = default;
    token_file(std::filesystem::path path, std::vector<std::uint16_t> tokens)
        : path_(std::move(path)), tokens_(std::move(tokens)) {}

    [[nodiscard]] const std::filesystem::path& path() const { return path_; }
    [[nodiscard]] std::span<const std::uint16_t> tokens() const { return tokens_; }
    [[nodiscard]] std::size_t size() const { return tokens_.size(); }

private:
    std::filesystem::path path_;
    std::vector<std::uint16_t> tokens_;
};

inline void write_token_file(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
    require(tokens.size() <= std::size_t(std::numeric_limits<std::int32_t>::max()), "token count", tokens.size(),
            "must fit the format's int32 count field");
    std::int32_t header[token_file_header_ints] = {};
    header[0] = token_file_magic;
    header[1] = token_file_version;
    header[2] = static_cast<std::int32_t>(tokens.size());
    write_file_atomically(path, [&](atomic_file& file) {
        file.write(std::as_bytes(std::span(header)));
        file.write(std::as_bytes(tokens));
    });
}

[[nodiscard]] inline token_file read_token_file(const std::filesystem::path& path) {
    const auto fail = [&](const std::string& what) { return invalid_argument("token file", path.string(), what); };
    std::error_code code;
    if (!std::filesystem::is_regular_file(path, code)) throw fail("does not exist or is not a regular file");
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw fail("cannot be opened for reading");
    const std::streamoff size = in.tellg();
    if (size < 0) throw fail("cannot be read");
    in.seekg(0);
    const auto file_size = static_cast<std::uint64_t>(size);
    if (file_size < token_file_header_bytes)
        throw fail("is " + std::to_string(file_size) + " bytes long, shorter than the " +
                   std::to_string(token_file_header_bytes) + "-byte header of an llm.c token file");
    std::int32_t header[token_file_header_ints];
    if (!in.read(reinterpret_cast<char*>(header), std::streamsize(token_file_header_bytes)))
        throw fail("cannot be read");
    if (header[0] != token_file_magic)
        throw fail("has magic " + std::to_string(header[0]) + ", expected " + std::to_string(token_file_magic) +
                   " (is it an llm.c .bin token file?)");
    if (header[1] != token_file_version)
        throw fail("has version " + std::to_string(header[1]) + ", expected " + std::to_string(token_file_version) +
                   " (uint16 tokens)");
    if (header[2] < 0) throw fail("has a negative token count " + std::to_string(header[2]));
    const auto count = static_cast<std::uint64_t>(header[2]);
    const std::uint64_t data_bytes = file_size - token_file_header_bytes;
    if (data_bytes < count * sizeof(std::uint16_t))
        throw fail("is truncated: its header announces " + std::to_string(count) + " tokens but it holds " +
                   std::to_string(data_bytes / sizeof(std::uint16_t)) + " (" + std::to_string(data_bytes) +
                   " bytes after the header)");
    if (data_bytes != count * sizeof(std::uint16_t))
        throw fail("has " + std::to_string(data_bytes) + " bytes after the header, but its token count " +
                   std::to_string(count) + " needs " + std::to_string(count * sizeof(std::uint16_t)));
    std::vector<std::uint16_t> tokens(count);
    if (!in.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(data_bytes)))
        throw fail("cannot be read to its end");
    return token_file(path, std::move(tokens));
}

}  // namespace weft::io
