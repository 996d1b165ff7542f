// The dense bf16 tensor-core peak of a GPU, what MFU is measured against (llm.c and the
// PaLM paper's definition: model flops per second over this peak). From the vendor's data
// sheets, without sparsity; a GPU not in the table gives 0, and the caller asks for the
// figure (train_gpt's --peak-tflops).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

// TFLOP/s for a device name as cudaGetDeviceProperties reports it ("NVIDIA H200", ...); 0
// when unknown. More specific names come first (an "H100 PCIe" is not an SXM H100).
[[nodiscard]] inline double bf16_peak_tflops(std::string_view device_name) {
    struct entry {
        std::string_view name_contains;
        double tflops;
    };
    static constexpr entry table[] = {
        {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H200 NVL", 835.0}, {"H100", 989.4},  {"H200", 989.4},
        {"H800", 989.4},      {"GH200", 989.4},    {"B200", 2250.0},    {"A100", 312.0},  {"A800", 312.0},
        {"L40S", 362.0},      {"L40", 181.0},      {"A6000", 154.8},    {"A10G", 70.0},   {"L4", 121.0},
    };
    for (const entry& e : table)
        if (device_name.find(e.name_contains) != std::string_view::npos) return e.tflops;
    return 0.0;
}

[[nodiscard]] inline double bf16_peak_tflops(int device) { return bf16_peak_tflops(gpu::device_name(device)); }

}  // namespace weft::exec::cuda_detail
