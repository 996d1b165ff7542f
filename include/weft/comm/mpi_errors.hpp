// MPI's return codes as weft::errors, and whether MPI may be called: the two checks every
// part of weft's MPI communicator (mpi.hpp, mpi_deferred.hpp) makes.
#pragma once

#include "weft/comm/mpi_header.hpp"

#include <cstddef>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft::comm::detail {

// Throws weft::error("<call> failed: <MPI's own message>") unless `code` is MPI_SUCCESS.
inline void mpi_check(int code, std::string_view call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
    throw error(std::string(call) + " failed: " +
                (length > 0 ? std::string(text, static_cast<std::size_t>(length))
                            : "error code " + std::to_string(code)));
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
