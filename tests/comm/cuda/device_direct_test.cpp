// comm::device_direct: with host buffers it is the inner communicator (the shared
// communicator checks over comm::local, no GPU needed); with device buffers it hands them to
// the inner communicator as they are, after the device's work on them, which here is
// host_staged<local> standing in for a CUDA-aware MPI (something that takes device memory).
// Exit 77 (skipped) for the device part without a GPU.
#include <type_traits>

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

}  // namespace

int main(int argc, char** argv) {
    return weft_test::run_device_test(
        argc, argv, {"device"}, [] { weft_test::host_buffer_checks(make_direct); },
        [](std::string_view) { weft_test::device_buffer_checks(make_over_device_capable); });
}
