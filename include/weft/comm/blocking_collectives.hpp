// The blocking collectives of the communicator concept, written once from the non-blocking
// ones: start the collective, then wait for it. A communicator derives from this (CRTP) when
// its blocking call would be exactly that; one whose library has a faster blocking call of
// its own (comm::mpi: MPI_Allreduce is tuned apart from MPI_Iallreduce) declares its own.
#pragma once

#include <span>

namespace weft::comm {

template <class Communicator>
class blocking_collectives {
public:
    void allreduce_sum(std::span<float> values) { self().iallreduce_sum(values).wait(); }
    void allreduce_sum(std::span<double> values) { self().iallreduce_sum(values).wait(); }
    void allgather(std::span<const float> mine, std::span<float> all) { self().iallgather(mine, all).wait(); }
    void allgather(std::span<const double> mine, std::span<double> all) { self().iallgather(mine, all).wait(); }
    void reduce_scatter_sum(std::span<const float> all, std::span<float> mine) {
        self().ireduce_scatter_sum(all, mine).wait();
    }
    void reduce_scatter_sum(std::span<const double> all, std::span<double> mine) {
        self().ireduce_scatter_sum(all, mine).wait();
    }

private:
    Communicator& self() { return static_cast<Communicator&>(*this); }
};

}  // namespace weft::comm
