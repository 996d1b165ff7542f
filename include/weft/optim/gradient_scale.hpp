// The averaging of a data-parallel group's summed gradients, values *= 1 / group size, on
// the host. The shardings (shard/replicate.hpp, shard/zero.hpp) take it there when the
// engine's compute backend has no kernel for it; a backend with optimizer kernels
// (exec/compute_backend.hpp) does the same multiplication where the buffer lives.
#pragma once

#include <span>

namespace weft::optim {

template <class Scalar>
void scale_on_host(std::span<Scalar> values, Scalar factor) {
    for (Scalar& v : values) v *= factor;
}

}  // namespace weft::optim
