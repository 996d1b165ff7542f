// Whether this MPI moves CUDA device memory itself (a "CUDA-aware" MPI), as far as the MPI
// can say: comm::device_direct (weft/comm/cuda/device_direct.hpp) hands it device buffers,
// which an MPI without that support reads as host addresses and crashes on.
//
// Open MPI answers twice: MPIX_CUDA_AWARE_SUPPORT in mpi-ext.h says whether the library
// was built with CUDA (known without a GPU), MPIX_Query_cuda_support() whether the running
// one has it (both must say yes; the run-time answer needs a GPU, and some releases answer
// no where point to point on device memory works, open-mpi/ompi#11070 and #13130). Other
// MPIs have no query that weft uses, so the answer is "unknown" and the caller decides
// (train_gpt takes --gpu-comm cuda-aware-mpi as the user's word for it). An environment
// variable WEFT_ASSUME_CUDA_AWARE_MPI=1 overrides a "no" (the caller names it in its
// refusal). Needs MPI initialised for the run-time query.
#pragma once

#include "weft/comm/mpi_header.hpp"

#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <cstdlib>
#include <string>

namespace weft::comm {

struct mpi_cuda_support {
    enum class answer { yes, no, unknown };
    answer cuda_aware = answer::unknown;
    std::string how;  // what was asked and what it said, for messages
};

// The name of the override: set to 1, a "no" below becomes "yes" (and `how` says so).
inline constexpr const char* assume_cuda_aware_mpi_variable = "WEFT_ASSUME_CUDA_AWARE_MPI";

namespace detail {
inline mpi_cuda_support unless_overridden(mpi_cuda_support s) {
    const char* assume = std::getenv(assume_cuda_aware_mpi_variable);
    if (s.cuda_aware == mpi_cuda_support::answer::no && assume != nullptr && std::string(assume) == "1")
        return {mpi_cuda_support::answer::yes, s.how + ", overridden by " + assume_cuda_aware_mpi_variable + "=1"};
    return s;
}
}  // namespace detail

// What the library was built with: no GPU needed (a "no" here is final but for the override).
[[nodiscard]] inline mpi_cuda_support query_mpi_cuda_build_support() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && !MPIX_CUDA_AWARE_SUPPORT
    return detail::unless_overridden(
        {mpi_cuda_support::answer::no, "Open MPI built without CUDA (MPIX_CUDA_AWARE_SUPPORT = 0)"});
#elif defined(MPIX_CUDA_AWARE_SUPPORT)
    return {mpi_cuda_support::answer::yes, "Open MPI built with CUDA (MPIX_CUDA_AWARE_SUPPORT = 1)"};
#else
    return {mpi_cuda_support::answer::unknown, "this MPI has no CUDA-support query that weft knows"};
#endif
}

// What the running library says, where it can say (ask where a GPU is: without one, Open
// MPI's run-time answer is no).
[[nodiscard]] inline mpi_cuda_support query_mpi_cuda_support() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    const int running = MPIX_Query_cuda_support();
    return detail::unless_overridden(
        {running == 1 ? mpi_cuda_support::answer::yes : mpi_cuda_support::answer::no,
         "Open MPI built with CUDA (MPIX_CUDA_AWARE_SUPPORT = 1), MPIX_Query_cuda_support() = " +
             std::to_string(running)});
#else
    return query_mpi_cuda_build_support();
#endif
}

}  // namespace weft::comm
