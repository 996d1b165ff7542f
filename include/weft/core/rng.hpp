// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
// A value depends only on (seed, tensor name, element index), never on which rank
// draws it or in what order, so initial weights do not depend on how the model is split.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>

namespace weft::rng {

using philox_counter = std::array<std::uint32_t, 4>;
using philox_key = std::array<std::uint32_t, 2>;

namespace detail {

constexpr std::uint32_t mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi) {
    const std::uint64_t product = std::uint64_t{a} * b;
    hi = static_cast<std::uint32_t>(product >> 32);
    return static_cast<std::uint32_t>(product);
}

}  // namespace detail

// Ten rounds of Philox4x32: the standard, statistically tested (BigCrush) variant.
[[nodiscard]] constexpr philox_counter philox4x32(philox_counter counter, philox_key key) {
    constexpr std::uint32_t multiplier0 = 0xD2511F53u, multiplier1 = 0xCD9E8D57u;
    constexpr std::uint32_t weyl0 = 0x9E3779B9u, weyl1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        std::uint32_t hi0 = 0, hi1 = 0;
        const std::uint32_t lo0 = detail::mulhilo(multiplier0, counter[0], hi0);
        const std::uint32_t lo1 = detail::mulhilo(multiplier1, counter[2], hi1);
        counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
        key[0] += weyl0;
        key[1] += weyl1;
    }
    return counter;
}

// FNV-1a over the name, mixed with the seed: a stable 64-bit stream id per tensor.
[[nodiscard]] constexpr std::uint64_t stream_id(std::uint64_t seed, std::string_view name) {
    std::uint64_t hash = 0xcbf29ce484222325ull ^ (seed * 0x9E3779B97F4A7C15ull);
    for (const char c : name) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 0x100000001b3ull;
    }
    return hash;
}

// Four independent 32-bit words for element `index` of tensor `name`.
[[nodiscard]] constexpr philox_counter bits(std::uint64_t seed, std::string_view name,
                                            std::uint64_t index) {
    const std::uint64_t id = stream_id(seed, name);
    return philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u},
                      {static_cast<std::uint32_t>(id), static_cast<std::uint32_t>(id >> 32)});
}

// Uniform in [0, 1): the top 24 bits, so every value is exactly representable as float.
[[nodiscard]] constexpr float uniform(std::uint64_t seed, std::string_view name, std::uint64_t index) {
    return static_cast<float>(bits(seed, name, index)[0] >> 8) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller on two words of the same draw (computed in double).
[[nodiscard]] inline float normal(std::uint64_t seed, std::string_view name, std::uint64_t index) {
    const philox_counter word = bits(seed, name, index);
    // u1 in (0, 1] so that log(u1) is finite; u2 in [0, 1).
    const double u1 = (static_cast<double>(word[0]) + 1.0) / 4294967296.0;
    const double u2 = static_cast<double>(word[1]) / 4294967296.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

}  // namespace weft::rng
