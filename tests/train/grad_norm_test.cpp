// The global gradient norm's counting rules (train/grad_norm.hpp): every element of the model
// counted by exactly one rank, whatever the layout. The engine's norm against one process
// over every layout is in parallel_matrix_test.cpp, and against PyTorch in
// tests/reference/gpt_reference.py.
#include "weft/train/grad_norm.hpp"

#include <catch2/catch.hpp>

#include <vector>

#include "weft/core/parameter_registry.hpp"

using weft::train::flat_run;

namespace {

// A stage with a tied embedding (4 elements), a whole LayerNorm weight (2) and a tensor
// split over 2 tensor-parallel ranks (this rank's slice: 3 of 6 columns, 2 rows).
weft::parameter_registry stage_registry() {
    weft::parameter_registry r;
    r.add("wte.weight", {2, 2});
    r.add("ln.weight", {2});
    r.add("fc.weight", {2, 6}, weft::tensor_split{.dim = 1, .parts = 1, .index = 0, .count = 2});
    return r;
}

}  // namespace

TEST_CASE("each tensor of the model is counted once in the global norm", "[train][grad_norm]") {
    const auto registry = stage_registry();
    const std::vector<weft::models::tied_parameter> tied{{"wte.weight", {0, 3}}};
    const std::vector<weft::nn::unit_range> two_stages{{0, 2}, {2, 4}};
    // Stage 0 holds unit 0 (the lowest holder of wte); tensor-parallel rank 0 counts everything.
    CHECK(weft::train::norm_counted_runs(registry, 0, 0, tied, two_stages) == std::vector<flat_run>{{0, 12}});
    // Stage 1 also holds wte (unit 3): not counted there.
    CHECK(weft::train::norm_counted_runs(registry, 1, 0, tied, two_stages) == std::vector<flat_run>{{4, 12}});
    // Tensor-parallel rank 1: only its slice; the whole tensors are rank 0's to count.
    CHECK(weft::train::norm_counted_runs(registry, 0, 1, tied, two_stages) == std::vector<flat_run>{{6, 12}});
    // No ties: a single stage counts all of it.
    CHECK(weft::train::norm_counted_runs(registry, 0, 0, {}, {{0, 4}}) == std::vector<flat_run>{{0, 12}});
}

TEST_CASE("a ZeRO range counts the part of the runs it holds", "[train][grad_norm]") {
    const std::vector<float> owned{1, 2, 3, 4};  // elements [5, 9) of the stage
    const std::vector<flat_run> runs{{0, 6}, {8, 20}};
    // Counted: element 5 (1) and element 8 (4).
    CHECK(weft::train::counted_sum_of_squares<float>(owned, 5, runs) == 17.0);
    CHECK(weft::train::counted_sum_of_squares<float>(owned, 100, runs) == 0.0);
    CHECK(weft::train::counted_sum_of_squares<float>({}, 0, runs) == 0.0);
}

TEST_CASE("clipping scales by max_norm / (norm + 1e-6) below 1, as PyTorch", "[train][grad_norm]") {
    CHECK(weft::train::clip_coefficient(0, 100) == 1.0);
    CHECK(weft::train::clip_coefficient(1.0, 0.5) == 1.0);
    CHECK(weft::train::clip_coefficient(1.0, 4.0) == Approx(1.0 / (4.0 + 1e-6)));
}
