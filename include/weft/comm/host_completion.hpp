// Completing a communication for the host. The communicator concept's request.wait() makes
// an operation's result usable by what comes next; for comm::nccl that is the GPU's compute
// stream, not the host (its wait() does not block). Code that reads a result with the CPU
// (averaging gradients on the host, copying a range out, a checkpoint) completes it with
// complete_on_host instead: synchronize() where the request has one, wait() otherwise.
#pragma once

namespace weft::comm {

// A request whose wait() orders only the device and whose synchronize() blocks the host.
template <class R>
concept host_synchronizable = requires(R& r) { r.synchronize(); };

// Returns once `r`'s result may be read and its buffers reused by the host.
template <class Request>
void complete_on_host(Request& r) {
    if constexpr (host_synchronizable<Request>)
        r.synchronize();
    else
        r.wait();
}

}  // namespace weft::comm
