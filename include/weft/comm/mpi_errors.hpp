// MPI's return codes as weft::errors, and whether MPI may be called: the two checks every
// part of weft's MPI communicator (mpi.hpp, mpi_deferred.hpp) makes.
#pragma once

#include "weft/comm/mpi_header.hpp"

#include <cstddef>
#include <string>
#include <string_view>

#include "weft/comm/mpi_fault.hpp"
#include "weft/core/error.hpp"

namespace weft::comm::detail {

// Throws weft::error("<call> failed: <MPI's own message>") unless `code` is MPI_SUCCESS; a dead
// peer or a revoked communicator (ULFM) is a comm::peer_lost, after every communicator of the
// process is revoked when recovery is on (mpi_fault.hpp).
inline void mpi_check(int code, std::string_view call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
    std::string message = std::string(call) + " failed: " +
                          (length > 0 ? std::string(text, static_cast<std::size_t>(length))
                                      : "error code " + std::to_string(code));
    if (is_peer_failure(code) || (peer_loss_recovery() && any_peer_failed())) {
        if (peer_loss_recovery()) revoke_all_communicators();
        throw peer_lost(message);
    }
    throw error(message);
}

// Between MPI_Init and MPI_Finalize.
inline bool mpi_usable() {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized != 0 && finalized == 0;
}

}  // namespace weft::comm::detail
