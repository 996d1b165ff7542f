// What a stage's backward tells its caller as it goes: the flat range [first, last) of its
// gradient buffer that this micro-batch's backward will not add to again, one range per
// layer, as soon as that layer is done. On the step's last micro-batch these ranges are
// final, and the data-parallel reduction of each can start while the layers before it still
// compute (train/program_loop.hpp passes a callback only then). A stage whose backward takes
// no callback is treated as finishing all its gradients at its end.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace weft::nn {

// A flat range of a stage's gradient buffer.
struct gradient_range {
    std::size_t first = 0;
    std::size_t last = 0;  // one past the end

    [[nodiscard]] std::size_t size() const { return last - first; }
    [[nodiscard]] bool empty() const { return last <= first; }
};

// The callback for a backward whose caller wants no ranges.
struct ignore_final_gradients {
    void operator()(gradient_range /*final*/) const {}
};

// The parts of `range` outside every range of `excluded` (in any order), in ascending order.
[[nodiscard]] inline std::vector<gradient_range> ranges_outside(gradient_range range,
                                                                std::vector<gradient_range> excluded) {
    std::sort(excluded.begin(), excluded.end(),
              [](gradient_range a, gradient_range b) { return a.first < b.first; });
    std::vector<gradient_range> out;
    std::size_t next = range.first;
    for (const gradient_range cut : excluded) {
        if (cut.last <= next || cut.first >= range.last) continue;
        if (cut.first > next) out.push_back({next, cut.first});
        next = std::max(next, cut.last);
    }
    if (next < range.last) out.push_back({next, range.last});
    return out;
}

}  // namespace weft::nn
