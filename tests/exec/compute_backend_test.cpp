// The compute_backend concept accepts the CPU backends and rejects incomplete types.
#include <catch2/catch.hpp>

#include "weft/exec/compute_backend.hpp"
#include "weft/exec/cpu.hpp"

namespace {

// Everything but the cross-entropy kernel: must not model the concept.
struct missing_kernel : weft::exec::cpu {
    static void cross_entropy() {}
};

struct no_matrix {
    static constexpr std::string_view name = "none";
    using scalar = float;
};

}  // namespace

TEST_CASE("cpu backends model compute_backend", "[exec][concept]") {
    STATIC_REQUIRE(weft::compute_backend<weft::exec::cpu>);
    STATIC_REQUIRE(weft::compute_backend<weft::exec::cpu_backend<double>>);
    STATIC_REQUIRE(weft::exec::cpu::name == "cpu");
    STATIC_REQUIRE(std::is_same_v<weft::exec::cpu::scalar, float>);
}

TEST_CASE("types missing part of the backend interface are rejected", "[exec][concept]") {
    STATIC_REQUIRE_FALSE(weft::compute_backend<int>);
    STATIC_REQUIRE_FALSE(weft::compute_backend<no_matrix>);
    STATIC_REQUIRE_FALSE(weft::compute_backend<missing_kernel>);
}
