// The error a communicator throws when a peer died, or when the communicator was revoked
// because one died elsewhere (MPI's ULFM: comm/mpi_fault.hpp), and whether the build can
// survive one. Apart from MPI so that a training loop can catch it in any build; only an MPI
// build with ULFM throws it.
#pragma once

#include "weft/core/error.hpp"

namespace weft::comm {

class peer_lost : public weft::error {
public:
    using weft::error::error;
};

// Whether this build can survive a process failure (an MPI with ULFM: WEFT_HAS_ULFM).
[[nodiscard]] constexpr bool has_ulfm() {
#if WEFT_HAS_ULFM
    return true;
#else
    return false;
#endif
}

}  // namespace weft::comm
