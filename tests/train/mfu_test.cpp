#include <catch2/catch.hpp>

#include "weft/train/mfu.hpp"

TEST_CASE("MFU follows llm.c's formula and peak table") {
    // GPT-2 124M at T = 1024: N = 124 439 808 parameters (tied wte counted once).
    const double per_token = weft::train::gpt_flops_per_token(124439808, 12, 768, 1024);
    CHECK(per_token == Approx(6.0 * 124439808 + 6.0 * 12 * 768 * 1024));
    CHECK(weft::train::bf16_peak_tflops("NVIDIA H200") == 989.0);
    CHECK(weft::train::bf16_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0);
    CHECK(weft::train::bf16_peak_tflops("Intel Xeon") < 0);
    // 1e6 tokens in one second at 1 PFLOP/s peak.
    CHECK(weft::train::mfu(per_token, 1e6, 1.0, 1000.0) == Approx(per_token * 1e6 / 1e15));
    CHECK(weft::train::mfu(per_token, 1e6, 1.0, -1.0) < 0);
    CHECK_THROWS_AS(weft::train::mfu(per_token, 1e6, 0.0, 989.0), weft::error);
}
