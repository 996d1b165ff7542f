// <mpi.h> for weft's MPI code, which uses only MPI's C API. Open MPI's and MPICH's <mpi.h>
// also pull in their deprecated C++ bindings, which fail a user's -Wall -Wextra -Werror
// (-Wcast-function-type) in code that never calls them; both libraries skip them when asked.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
