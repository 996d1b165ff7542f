// Links weft::mpi: proves the exported MPI target carries MPI's flags and libraries.
#include <weft/comm/mpi.hpp>
#include <weft/comm/mpi_environment.hpp>

int main(int argc, char** argv) {
    weft::comm::mpi_environment environment(argc, argv);
    return weft::comm::mpi::world().size() >= 1 ? 0 : 1;
}
