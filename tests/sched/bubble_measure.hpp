// The bubble and the activation peak of a program simulated with unit costs, as the property
// sweeps over p, m and v compare them with each schedule's closed forms.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>

#include "weft/sched/simulate.hpp"

namespace weft_test {

struct measured_bubble {
    double bubble = 0;  // span - busy of the rank with the longest span
    double peak = 0;    // largest peak over ranks, in micro-batches of a rank's whole share
};

inline measured_bubble measure_bubble(const weft::sched::program& prog) {
    const weft::sched::simulation s = weft::sched::simulate(prog);
    std::size_t longest = 0;
    for (std::size_t r = 0; r < s.span.size(); ++r)
        if (s.span[r] > s.span[longest]) longest = r;
    // With unit costs every rank computes 3m.
    CHECK(s.busy[longest] == Approx(3.0 * prog.num_microbatches));
    return {s.span[longest] - s.busy[longest], *std::max_element(s.peak_activations.begin(), s.peak_activations.end())};
}

// Closed forms hold to this margin (the simulation adds unit costs in doubles).
inline constexpr double bubble_tolerance = 1e-6;

}  // namespace weft_test
