// Blockwise 8-bit quantization of what SWARM sends between stages (activations and their
// gradients), as in the SWARM paper's compression: each block of `block` values is sent as
// one float scale (the block's largest magnitude over 127) and one signed byte per value,
// rounded to nearest. A value comes back within half a step of itself: |x - x'| <= absmax /
// 254 of its block. A message of n floats shrinks from 4n bytes to about n + 4n / block.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::swarm {

// The wire form: a header (element count, block size), the scales, then the bytes.
struct quantized {
    std::uint64_t count = 0;
    std::uint64_t block = 0;
    std::vector<float> scales;       // one per block
    std::vector<std::int8_t> codes;  // one per value

    // Bytes on the wire.
    [[nodiscard]] std::size_t bytes() const {
        return 2 * sizeof(std::uint64_t) + scales.size() * sizeof(float) + codes.size();
    }
};

// The largest error dequantize() can make on a value of a block whose largest magnitude is
// `absmax`: half a quantization step.
[[nodiscard]] inline double quantization_error_bound(double absmax) { return absmax / 254.0; }

[[nodiscard]] inline quantized quantize_blockwise(std::span<const float> values, std::size_t block) {
    require(block >= 1, "quantization block", block, "must be >= 1");
    quantized out;
    out.count = values.size();
    out.block = block;
    out.codes.resize(values.size());
    for (std::size_t first = 0; first < values.size(); first += block) {
        const std::size_t end = std::min(values.size(), first + block);
        float absmax = 0;
        for (std::size_t i = first; i < end; ++i) {
            if (!std::isfinite(values[i]))
                throw invalid_argument("value " + std::to_string(i) + " to quantize", values[i],
                                       "must be finite (an activation or gradient overflowed)");
            absmax = std::max(absmax, std::fabs(values[i]));
        }
        const float scale = absmax / 127.0f;
        out.scales.push_back(scale);
        for (std::size_t i = first; i < end; ++i)
            out.codes[i] = scale == 0 ? std::int8_t{0}
                                      : static_cast<std::int8_t>(std::clamp(std::lround(values[i] / scale), -127L, 127L));
    }
    return out;
}

inline void dequantize_blockwise(const quantized& q, std::span<float> out) {
    require(out.size() == q.count, "dequantize output size", out.size(),
            "must equal the quantized count " + std::to_string(q.count));
    require(q.block >= 1, "quantized block", q.block, "must be >= 1");
    require(q.codes.size() == q.count, "quantized codes", q.codes.size(), "must equal the count " + std::to_string(q.count));
    require(q.scales.size() == (q.count + q.block - 1) / q.block, "quantized scales", q.scales.size(),
            "must be one per block of " + std::to_string(q.block));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(q.codes[i]) * q.scales[i / q.block];
}

// The wire form as bytes, and back; decode() checks the header against the buffer's length.
[[nodiscard]] inline std::vector<std::byte> encode(const quantized& q) {
    std::vector<std::byte> out(q.bytes());
    std::byte* at = out.data();
    const auto put = [&](const void* data, std::size_t n) {
        if (n > 0) std::memcpy(at, data, n);
        at += n;
    };
    put(&q.count, sizeof q.count);
    put(&q.block, sizeof q.block);
    put(q.scales.data(), q.scales.size() * sizeof(float));
    put(q.codes.data(), q.codes.size());
    return out;
}

[[nodiscard]] inline quantized decode(std::span<const std::byte> bytes) {
    quantized q;
    constexpr std::size_t header = 2 * sizeof(std::uint64_t);
    require(bytes.size() >= header, "quantized message bytes", bytes.size(),
            "must hold at least the " + std::to_string(header) + "-byte header");
    std::memcpy(&q.count, bytes.data(), sizeof q.count);
    std::memcpy(&q.block, bytes.data() + sizeof q.count, sizeof q.block);
    require(q.block >= 1, "quantized message block", q.block, "must be >= 1");
    const std::uint64_t blocks = q.count / q.block + (q.count % q.block != 0 ? 1 : 0);
    const std::uint64_t expected = header + blocks * sizeof(float) + q.count;
    require(q.count <= bytes.size() && bytes.size() == expected, "quantized message bytes", bytes.size(),
            "must be " + std::to_string(expected) + " for " + std::to_string(q.count) + " values in blocks of " +
                std::to_string(q.block));
    q.scales.resize(blocks);
    q.codes.resize(q.count);
    if (blocks > 0) std::memcpy(q.scales.data(), bytes.data() + header, blocks * sizeof(float));
    if (q.count > 0) std::memcpy(q.codes.data(), bytes.data() + header + blocks * sizeof(float), q.count);
    return q;
}

}  // namespace weft::swarm
