// Model FLOPs utilisation with llm.c's formula (gpt2_estimate_mfu): a GPT step does
// flops_per_token = 6 N + 6 L C T per token (6 N for the weight matmuls of forward and
// backward, 6 L C T for the causal attention matmuls), and MFU is the achieved rate over
// the device's dense peak. The peak table is for bf16 tensor cores; CPUs have no entry
// and take a peak from the user (or from a measured GEMM rate).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft::train {

[[nodiscard]] constexpr double gpt_flops_per_token(std::int64_t parameters, int layers, int d_model, int seq_len) {
    return 6.0 * static_cast<double>(parameters) + 6.0 * layers * static_cast<double>(d_model) * seq_len;
}

struct device_peak {
    std::string_view name;  // matched as a substring of the device name
    double bf16_tflops;     // dense, no sparsity
};

// Dense bf16 peaks from the vendors' data sheets.
inline constexpr std::array<device_peak, 4> bf16_peaks{{
    {"H200", 989.0},
    {"H100", 989.0},  // SXM; the PCIe card is lower (756)
    {"A100", 312.0},
    {"L40S", 362.0},
}};

// Peak bf16 TFLOP/s of a device by name, or a negative value when unknown (llm.c's
// convention: MFU is then not reported).
[[nodiscard]] constexpr double bf16_peak_tflops(std::string_view device_name) {
    for (const auto& peak : bf16_peaks)
        if (device_name.find(peak.name) != std::string_view::npos) return peak.bf16_tflops;
    return -1.0;
}

// MFU of a step that processed `tokens` tokens in `seconds` against `peak_tflops`.
[[nodiscard]] constexpr double mfu(double flops_per_token, double tokens, double seconds, double peak_tflops) {
    require(seconds > 0, "seconds", seconds, "a step takes positive time");
    if (peak_tflops <= 0) return -1.0;
    return flops_per_token * tokens / seconds / (peak_tflops * 1e12);
}

}  // namespace weft::train
