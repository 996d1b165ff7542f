// comm::host_side(c): the communicator for protocols that send host memory point to point
// and read what they receive on the host once wait() returns: a checkpoint gathering its
// stages to the writer (train/checkpoint.hpp) and a layout switch moving the training state
// (elastic/transfer.hpp).
//
// For most communicators that is c itself: comm::local and comm::mpi move host memory, and
// their wait() completes a message for the host. A device communicator such as comm::nccl
// does neither (its sends and receives refuse host memory, and its wait() only orders the
// compute stream), so it is paired with a host communicator over the same ranks
// (comm::with_host), and host_side gives these protocols that one.
#pragma once

namespace weft::comm {

template <class C>
[[nodiscard]] auto& host_side(C& c) {
    if constexpr (requires { c.host(); })
        return c.host();
    else
        return c;
}

}  // namespace weft::comm
