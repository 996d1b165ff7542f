// The norm-wise relative difference of two tensors, ||a - b|| / ||b||, which the engine
// tests compare runs of different layouts by. Element-wise ratios are not meaningful
// there: reduction order moves a near-zero element by far more than its own size.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace weft_test {

inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        norm += double(b[i]) * b[i];
    }
    return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace weft_test
