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

// A uniform agreement (comm::mpi::agree) this rank was in came out "no": another rank left
// its step with a peer_lost and voted no as its recovery's first act. This rank's vote is
// already cast, so its recovery begins without one (run/elastic_session.hpp: every rank takes
// part in the same number of agreements, which MPI's fault tolerance pairs up in order).
class peer_lost_in_agreement : public peer_lost {
public:
    using peer_lost::peer_lost;
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
