// The manifest of a SWARM stage's state image: what a worker's state server and a checkpoint
// hand over, in this order (swarm/stage_service.hpp holds the image; swarm/protocol.hpp puts
// the manifest on the wire). Its own header, so that the wire protocol does not pull in the
// stage's compute.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weft::swarm {

// What the stage's state image holds: the parameters, then each optimizer tensor, all
// float, as of `step` (steps of the stage's optimizer taken).
struct state_manifest {
    std::uint64_t step = 0;
    std::uint64_t parameters = 0;
    std::vector<std::pair<std::string, std::uint64_t>> optimizer_tensors;  // name, elements

    [[nodiscard]] std::uint64_t total() const {
        std::uint64_t n = parameters;
        for (const auto& [name, count] : optimizer_tensors) n += count;
        return n;
    }
    friend bool operator==(const state_manifest&, const state_manifest&) = default;
};

}  // namespace weft::swarm
