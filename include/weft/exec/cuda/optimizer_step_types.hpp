// The plain type the gradient summary kernels (kernels/optimizer_step.cuh) take, apart from
// the kernels so that host code (exec/cuda.hpp) can fill it without nvcc. (AdamW's kernels
// take optim::adamw_factors<float>, whose header is plain C++ too.)
#pragma once

#include <cstddef>

namespace weft::exec::cuda_detail {

// A piece [first, last) of the owned gradients (relative to their first element), counted in
// the norm or not. A summary's pieces cover the owned gradients in order.
struct gradient_segment {
    std::size_t first;
    std::size_t last;
    int counted;
};

}  // namespace weft::exec::cuda_detail
