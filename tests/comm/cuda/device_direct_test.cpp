// comm::device_direct: with host buffers it is the inner communicator (the shared
// communicator checks over comm::local, no GPU needed); with device buffers it hands them to
// the inner communicator as they are, after the device's work on them, which here is
// host_staged<local> standing in for a CUDA-aware MPI (something that takes device memory),
// and a probe inside that sees whether a buffer's writer had finished when it was handed over.
// Exit 77 (skipped) for the device part without a GPU.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "device_communicator_checks.hpp"
#include "weft/comm/cuda/device_direct.hpp"
#include "weft/comm/cuda/host_staged.hpp"
#include "weft/comm/local.hpp"

namespace {

using direct = weft::comm::device_direct<weft::comm::local>;
static_assert(weft::communicator<direct>);
static_assert(std::is_same_v<direct::memory_space, weft::device_space>);
static_assert(direct::matching == weft::comm::matching_of<weft::comm::local>);

using over_device_capable = weft::comm::device_direct<weft::comm::host_staged<weft::comm::local>>;
static_assert(weft::communicator<over_device_capable>);

direct make_direct(weft::comm::local world) { return direct(std::move(world)); }
over_device_capable make_over_device_capable(weft::comm::local world) {
    return over_device_capable(weft::comm::host_staged<weft::comm::local>(std::move(world)));
}

// The inner side of the wait check: at isend, before host_staged's own wait for the device,
// it notes whether the work queued on `writer` had finished.
class probe : public weft::comm::host_staged<weft::comm::local> {
public:
    using base = weft::comm::host_staged<weft::comm::local>;
    probe(base inner, cudaStream_t writer, bool* writer_done)
        : base(std::move(inner)), writer_(writer), writer_done_(writer_done) {}
    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        *writer_done_ = cudaStreamQuery(writer_) == cudaSuccess;
        return base::isend(data, dest, tag);
    }
    [[nodiscard]] probe split(int color, int key) { return {base::split(color, key), writer_, writer_done_}; }

private:
    cudaStream_t writer_;
    bool* writer_done_;
};
static_assert(weft::communicator<probe>);

// A send's buffer written on a stream of its own (a non-blocking one, which nothing else
// waits for) just before the send: MPI must not see it before that write has finished.
void waits_for_the_writer() {
    weft::gpu::check(cudaSetDevice(0), "cudaSetDevice");
    cudaStream_t writer = nullptr;
    weft::gpu::check(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    bool writer_done = false;
    weft::comm::local::run(1, [&](weft::comm::local& world) {
        weft::comm::device_direct<probe> c(probe(probe::base(std::move(world)), writer, &writer_done));
        constexpr std::size_t n = std::size_t(1) << 27;  // 512 MiB of floats, written 20 times: milliseconds
        weft::gpu::device_buffer<float> buffer(n);
        for (int i = 0; i < 20; ++i)
            weft::gpu::check(cudaMemsetAsync(buffer.data(), i, n * sizeof(float), writer), "cudaMemsetAsync");
        std::vector<float> back(16);
        auto recv = c.irecv(std::as_writable_bytes(std::span<float>(back)), 0, 3);
        auto send = c.isend(std::as_bytes(std::span<const float>(buffer.data(), back.size())), 0, 3);
        send.wait();
        recv.wait();
    });
    weft::gpu::check(cudaStreamDestroy(writer), "cudaStreamDestroy");
    weft_test::expect(writer_done, "device_direct waits for the device before it hands a device buffer over");
}

}  // namespace

int main(int argc, char** argv) {
    return weft_test::run_device_test(
        argc, argv, {"device"}, [] { weft_test::host_buffer_checks(make_direct); },
        [](std::string_view) {
            weft_test::device_buffer_checks(make_over_device_capable);
            waits_for_the_writer();
        });
}
