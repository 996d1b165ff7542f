// The faults a SWARM worker plays on itself on purpose (swarm_train --fail, --stall, --slow):
// what the welcome message carries (swarm/protocol.hpp) and the fault flags parse into
// (swarm/fault_flags.hpp).
#pragma once

#include <cstdint>

namespace weft::swarm {

// Faults a worker plays on itself, for tests and demonstrations (swarm_train --fail,
// --stall, --slow).
struct worker_faults {
    enum class phase : std::uint8_t { any = 0, forward = 1, backward = 2 };
    // Steps count from the one named: the worker's first call (of the phase) at or after it.
    std::int64_t fail_step = -1;  // >= 0: the process kills itself (SIGKILL) at that call
    phase fail_phase = phase::any;
    std::int64_t stall_step = -1;  // >= 0: that call waits stall_seconds first (once)
    double stall_seconds = 0;
    double slow_factor = 1;  // every call takes this many times its compute time
};

}  // namespace weft::swarm
