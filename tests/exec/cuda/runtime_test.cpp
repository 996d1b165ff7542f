// CUDA runtime smoke test: built wherever the CUDA toolkit is, run where a GPU is.
// Without a GPU it exits with 77, which ctest reports as skipped (not passed).
#include <cuda_runtime_api.h>
#if defined(WEFT_HAS_NCCL)
#include <nccl.h>
#endif

#include <cstdio>
#include <vector>

#include "weft/gpu/runtime.hpp"

namespace {

int failures = 0;

void expect(bool condition, const char* what) {
    if (!condition) {
        std::fprintf(stderr, "FAILED: %s\n", what);
        ++failures;
    }
}

}  // namespace

int main() {
    const auto [major, minor] = weft::gpu::runtime_version();
#if defined(WEFT_HAS_NCCL)
    int nccl_version = 0;
    expect(ncclGetVersion(&nccl_version) == ncclSuccess && nccl_version > 0, "ncclGetVersion");
    std::printf("CUDA runtime %d.%d, NCCL %d\n", major, minor, nccl_version);
#else
    std::printf("CUDA runtime %d.%d, built without NCCL\n", major, minor);
#endif

    const int devices = weft::gpu::device_count();
    if (devices == 0) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    std::printf("device 0: %s\n", weft::gpu::device_name(0).c_str());

    // A round trip through device memory returns the data unchanged.
    std::vector<float> host(1 << 20);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
    void* device = nullptr;  // cuda_runtime_api.h's C form: the typed overload is cuda_runtime.h's
    weft::gpu::check(cudaMalloc(&device, host.size() * sizeof(float)), "cudaMalloc");
    weft::gpu::check(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
                            "cudaMemcpy to device");
    std::vector<float> back(host.size());
    weft::gpu::check(cudaMemcpy(back.data(), device, back.size() * sizeof(float), cudaMemcpyDeviceToHost),
                            "cudaMemcpy to host");
    weft::gpu::check(cudaFree(device), "cudaFree");
    expect(back == host, "device round trip");

    // Errors name the call and CUDA's reason.
    bool threw = false;
    try {
        weft::gpu::check(cudaErrorInvalidValue, "cudaFoo");
    } catch (const weft::error& e) {
        threw = std::string(e.what()).find("cudaFoo failed: cudaErrorInvalidValue") != std::string::npos;
    }
    expect(threw, "check() names the call and the error");
    bool bad_device = false;
    try {
        (void)weft::gpu::device_name(devices);
    } catch (const weft::error&) {
        bad_device = true;
    }
    expect(bad_device, "device_name rejects an out-of-range device");

    std::printf("%d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
