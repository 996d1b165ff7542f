// SHA-256 (FIPS 180-4) of bytes and of files: the checksum a checkpoint manifest records
// for each of its files. SHA-256 rather than a faster CRC because a user can check it with
// the standard `sha256sum` tool, and a torn or swapped file cannot collide with it.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::io {

class sha256 {
public:
    sha256() = default;

    void update(std::span<const std::byte> bytes) {
        length_bits_ += static_cast<std::uint64_t>(bytes.size()) * 8;
        while (!bytes.empty()) {
            const std::size_t take = std::min(bytes.size(), block_.size() - filled_);
            std::memcpy(block_.data() + filled_, bytes.data(), take);
            filled_ += take;
            bytes = bytes.subspan(take);
            if (filled_ == block_.size()) {
                compress();
                filled_ = 0;
            }
        }
    }

    // The digest as 64 lowercase hex digits, as sha256sum prints it. Ends the hash.
    [[nodiscard]] std::string hex_digest() {
        const std::uint64_t bits = length_bits_;
        block_[filled_++] = 0x80;
        if (filled_ > 56) {
            while (filled_ < 64) block_[filled_++] = 0;
            compress();
            filled_ = 0;
        }
        while (filled_ < 56) block_[filled_++] = 0;
        for (int i = 7; i >= 0; --i) block_[filled_++] = static_cast<std::uint8_t>(bits >> (8 * i));
        compress();
        filled_ = 0;
        static constexpr char digits[] = "0123456789abcdef";
        std::string text;
        text.reserve(64);
        for (const std::uint32_t word : state_)
            for (int shift = 28; shift >= 0; shift -= 4) text.push_back(digits[(word >> shift) & 0xf]);
        return text;
    }

private:
    static constexpr std::array<std::uint32_t, 64> round_constants{
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

    static constexpr std::uint32_t rotate_right(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

    void compress() {
        std::array<std::uint32_t, 64> w{};
        for (std::size_t i = 0; i < 16; ++i)
            w[i] = (std::uint32_t(block_[4 * i]) << 24) | (std::uint32_t(block_[4 * i + 1]) << 16) |
                   (std::uint32_t(block_[4 * i + 2]) << 8) | std::uint32_t(block_[4 * i + 3]);
        for (std::size_t i = 16; i < 64; ++i) {
            const std::uint32_t s0 = rotate_right(w[i - 15], 7) ^ rotate_right(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const std::uint32_t s1 = rotate_right(w[i - 2], 17) ^ rotate_right(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
        std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
        for (std::size_t i = 0; i < 64; ++i) {
            const std::uint32_t s1 = rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25);
            const std::uint32_t choose = (e & f) ^ (~e & g);
            const std::uint32_t t1 = h + s1 + choose + round_constants[i] + w[i];
            const std::uint32_t s0 = rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22);
            const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
            const std::uint32_t t2 = s0 + majority;
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        state_[0] += a;
        state_[1] += b;
        state_[2] += c;
        state_[3] += d;
        state_[4] += e;
        state_[5] += f;
        state_[6] += g;
        state_[7] += h;
    }

    std::array<std::uint32_t, 8> state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::array<std::uint8_t, 64> block_{};
    std::size_t filled_ = 0;
    std::uint64_t length_bits_ = 0;
};

[[nodiscard]] inline std::string sha256_hex(std::span<const std::byte> bytes) {
    sha256 hash;
    hash.update(bytes);
    return hash.hex_digest();
}

// The file's digest, read in 1 MiB pieces (a checkpoint need not fit in memory twice).
[[nodiscard]] inline std::string sha256_file(const std::filesystem::path& path) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr)
        throw invalid_argument("file", path.string(),
                               "cannot be opened to check its SHA-256: " + std::generic_category().message(errno));
    sha256 hash;
    std::vector<std::byte> piece(std::size_t{1} << 20);
    std::size_t got = 0;
    while ((got = std::fread(piece.data(), 1, piece.size(), file)) > 0)
        hash.update(std::span<const std::byte>(piece.data(), got));
    const bool failed = std::ferror(file) != 0;
    std::fclose(file);
    if (failed) throw invalid_argument("file", path.string(), "cannot be read to check its SHA-256");
    return hash.hex_digest();
}

}  // namespace weft::io
