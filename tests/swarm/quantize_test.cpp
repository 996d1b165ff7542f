// Blockwise 8-bit quantization of SWARM's messages: every value within half a step of its
// block's scale, the bytes it saves, and the wire form refusing malformed messages.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include "weft/swarm/quantize.hpp"

using namespace weft::swarm;

TEST_CASE("every value comes back within half a step of its block", "[swarm][quantize]") {
    std::mt19937 random(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{4096}}) {
        std::vector<float> x(10000);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(random) * (i % 3 == 0 ? 100.0f : 0.01f);
        for (std::size_t i = 200; i < 200 + block && i < x.size(); ++i) x[i] = 0;  // a zero block or part of one
        const quantized q = decode(encode(quantize_blockwise(x, block)));
        std::vector<float> back(x.size());
        dequantize_blockwise(q, back);
        std::size_t outside = 0;
        for (std::size_t first = 0; first < x.size(); first += block) {
            const std::size_t end = std::min(x.size(), first + block);
            double absmax = 0;
            for (std::size_t i = first; i < end; ++i) absmax = std::max(absmax, std::fabs(static_cast<double>(x[i])));
            // float rounding of the scale and product: a few ulps beyond the exact bound
            const double bound = quantization_error_bound(absmax) * (1 + 1e-5);
            for (std::size_t i = first; i < end; ++i)
                if (std::fabs(static_cast<double>(back[i]) - x[i]) > bound) ++outside;
        }
        INFO("block " << block);
        CHECK(outside == 0);
        CHECK(back[200] == 0.0f);
        CHECK(q.bytes() == 16 + 4 * ((x.size() + block - 1) / block) + x.size());
    }
}

TEST_CASE("quantizing saves bytes per message", "[swarm][quantize]") {
    const std::vector<float> x(1 << 16, 0.5f);
    const quantized q = quantize_blockwise(x, 64);
    const double plain = static_cast<double>(x.size() * sizeof(float));
    CHECK(static_cast<double>(q.bytes()) / plain == Approx(0.25 + 1.0 / 64).epsilon(0.01));
    std::vector<float> back(x.size());
    dequantize_blockwise(q, back);
    CHECK(back[123] == 0.5f);  // the block's largest value is exact
}

TEST_CASE("bad input to quantization is refused by name", "[swarm][quantize]") {
    const std::vector<float> x{1.0f, std::numeric_limits<float>::infinity()};
    CHECK_THROWS_WITH(quantize_blockwise(x, 4), Catch::Contains("value 1 to quantize") && Catch::Contains("finite"));
    CHECK_THROWS_WITH(quantize_blockwise(std::vector<float>{1.0f}, 0), Catch::Contains("quantization block"));
    const auto bytes = encode(quantize_blockwise(std::vector<float>{1.0f, 2.0f, 3.0f}, 2));
    CHECK(decode(bytes).count == 3);
    CHECK_THROWS_WITH(decode(std::span<const std::byte>(bytes).first(bytes.size() - 1)),
                      Catch::Contains("quantized message bytes"));
    CHECK_THROWS_WITH(decode(std::span<const std::byte>(bytes).first(8)), Catch::Contains("header"));
    std::vector<float> wrong(2);
    CHECK_THROWS_WITH(dequantize_blockwise(decode(bytes), wrong), Catch::Contains("dequantize output size"));
}
