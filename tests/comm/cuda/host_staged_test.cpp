// comm::host_staged over comm::local: with host buffers it is the inner communicator (the
// shared communicator checks, no GPU needed); with device buffers every operation carries
// the same values through host memory, on rank threads sharing one GPU. Exit 77 (skipped)
// for the device part without a GPU.
#include <type_traits>

#include "device_communicator_checks.hpp"
#include "weft/comm/cuda/host_staged.hpp"
#include "weft/comm/local.hpp"

namespace {

using staged = weft::comm::host_staged<weft::comm::local>;
static_assert(weft::communicator<staged>);
static_assert(std::is_same_v<staged::memory_space, weft::device_space>);

staged make(weft::comm::local world) { return staged(std::move(world)); }

}  // namespace

int main(int argc, char** argv) {
    return weft_test::run_device_test(
        argc, argv, {"device"}, [] { weft_test::host_buffer_checks(make); },
        [](std::string_view) { weft_test::device_buffer_checks(make); });
}
