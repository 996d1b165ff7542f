// The CPU backend objects tests hand to the layers, stages and engines they build: `cpu` computes
// in float as training does, `cpu64` in double for gradient checks. Inline variables, so each is
// one object in a test program, also where a test's files compile as one unit (WEFT_UNITY_TESTS).
#pragma once

#include "shared_backend.hpp"
#include "weft/exec/cpu.hpp"

namespace weft_test {

inline weft::exec::cpu& cpu = shared_backend<weft::exec::cpu>();
inline weft::exec::cpu_backend<double>& cpu64 = shared_backend<weft::exec::cpu_backend<double>>();

}  // namespace weft_test
