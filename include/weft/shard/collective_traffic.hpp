// The bytes a rank sends for a stage's data-parallel collectives in one step, by the ring
// algorithms' cost (what MPI and NCCL run for large messages): an all-reduce of n elements
// over g ranks sends 2(g-1)/g·n of them, an all-gather or a reduce-scatter of an n-element
// buffer (g·n/g per rank) (g-1)/g·n. A model of the traffic, counted as each collective
// starts, not a measurement of the wire; what `--zero-reduce` trades memory against.
#pragma once

#include <cstddef>

namespace weft::shard {

struct collective_traffic {
    double gathered_bytes = 0;  // parameters brought back (ZeRO's all-gathers, ZeRO-3's per-layer gathers)
    double reduced_bytes = 0;   // gradients summed (all-reduces, reduce-scatters)

    [[nodiscard]] double total() const { return gathered_bytes + reduced_bytes; }
    friend collective_traffic operator+(collective_traffic a, const collective_traffic& b) {
        return {a.gathered_bytes + b.gathered_bytes, a.reduced_bytes + b.reduced_bytes};
    }
};

// Ring cost of one collective over `ranks` ranks, in bytes sent per rank.
[[nodiscard]] inline double all_reduce_bytes(std::size_t elements, std::size_t element_bytes, int ranks) {
    if (ranks <= 1) return 0;
    return 2.0 * (ranks - 1) / ranks * static_cast<double>(elements * element_bytes);
}
// `elements`: the whole buffer (all ranks' pieces together).
[[nodiscard]] inline double all_gather_bytes(std::size_t elements, std::size_t element_bytes, int ranks) {
    if (ranks <= 1) return 0;
    return static_cast<double>(ranks - 1) / ranks * static_cast<double>(elements * element_bytes);
}
[[nodiscard]] inline double reduce_scatter_bytes(std::size_t elements, std::size_t element_bytes, int ranks) {
    return all_gather_bytes(elements, element_bytes, ranks);
}

}  // namespace weft::shard
