// Whether this MPI moves CUDA device memory itself (a "CUDA-aware" MPI), as far as the MPI
// can say: comm::device_direct (weft/comm/cuda/device_direct.hpp) hands it device buffers,
// which an MPI without that support reads as host addresses and crashes on.
//
// Open MPI answers twice: MPIX_CUDA_AWARE_SUPPORT in mpi-ext.h says whether the library
// was built with CUDA, MPIX_Query_cuda_support() whether the running one has it (both must
// say yes). Other MPIs have no such query that weft uses, so the answer is "unknown" and the
// caller decides (train_gpt takes --gpu-comm cuda-aware-mpi as the user's word for it).
// Needs MPI initialised for the run-time query.
#pragma once

#include <mpi.h>

#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <string>

namespace weft::comm {

struct mpi_cuda_support {
    enum class answer { yes, no, unknown };
    answer cuda_aware = answer::unknown;
    std::string how;  // what was asked and what it said, for messages
};

[[nodiscard]] inline mpi_cuda_support query_mpi_cuda_support() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
#if MPIX_CUDA_AWARE_SUPPORT
    const int running = MPIX_Query_cuda_support();
    return {running == 1 ? mpi_cuda_support::answer::yes : mpi_cuda_support::answer::no,
            "Open MPI built with CUDA (MPIX_CUDA_AWARE_SUPPORT = 1), MPIX_Query_cuda_support() = " +
                std::to_string(running)};
#else
    return {mpi_cuda_support::answer::no, "Open MPI built without CUDA (MPIX_CUDA_AWARE_SUPPORT = 0)"};
#endif
#else
    return {mpi_cuda_support::answer::unknown, "this MPI has no CUDA-support query that weft knows"};
#endif
}

}  // namespace weft::comm
