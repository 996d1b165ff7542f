// The compute_backend concept accepts the CPU backends and rejects incomplete types.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "weft/exec/compute_backend.hpp"
#include "weft/exec/cpu.hpp"

namespace {

// Everything but the cross-entropy kernel: must not model the concept.
struct missing_kernel : weft::exec::cpu {
    static void cross_entropy() {}
};

// The kernels, but no memory space: nothing says where its matrices live.
struct no_memory_space {
    static constexpr std::string_view name = "nowhere";
    using scalar = float;
    using matrix = weft::exec::cpu::matrix;
};

struct no_matrix {
    static constexpr std::string_view name = "none";
    using scalar = float;
};

// Matrices that store 16-bit elements for float weights, as exec::cuda's bf16 activations
// do; Element decides whether the engine could move them as bytes.
template <class Element>
struct narrow_matrix {
    using value_type = Element;
    narrow_matrix() = default;
    narrow_matrix(int, int) {}
    Element* data() { return nullptr; }
    const Element* data() const { return nullptr; }
    std::size_t size() const { return 0; }
};

template <class Element>
struct narrow_backend {
    static constexpr std::string_view name = "narrow";
    using scalar = float;
    using memory_space = weft::device_space;
    using matrix = narrow_matrix<Element>;
    int rows(const matrix&) const { return 0; }
    int cols(const matrix&) const { return 0; }
};

struct not_bytes {  // not trivially copyable: the engine could not send it as bytes
    not_bytes() = default;
    not_bytes(const not_bytes&) {}
};

}  // namespace

TEST_CASE("cpu backends model compute_backend", "[exec][concept]") {
    STATIC_REQUIRE(weft::compute_backend<weft::exec::cpu>);
    STATIC_REQUIRE(weft::compute_backend<weft::exec::cpu_backend<double>>);
    STATIC_REQUIRE(weft::exec::cpu::name == "cpu");
    STATIC_REQUIRE(std::is_same_v<weft::exec::cpu::scalar, float>);
    STATIC_REQUIRE(std::is_same_v<weft::exec::cpu::memory_space, weft::host_space>);
}

TEST_CASE("the cpu backend is an object whose kernels are called on it", "[exec][concept]") {
    // Each group of the interface is its own named concept, so a failure says which part is missing.
    STATIC_REQUIRE(weft::exec::backend_identity<weft::exec::cpu>);
    STATIC_REQUIRE(weft::exec::backend_matrices<weft::exec::cpu>);
    STATIC_REQUIRE(weft::exec::linear_kernels<weft::exec::cpu>);
    STATIC_REQUIRE(weft::exec::embedding_kernels<weft::exec::cpu>);
    STATIC_REQUIRE(weft::exec::attention_kernels<weft::exec::cpu>);
    weft::exec::cpu backend;
    const weft::exec::cpu::matrix a = weft::exec::cpu::matrix::Ones(2, 3);
    CHECK(backend.rows(a) == 2);
    CHECK(backend.cols(a) == 3);
    CHECK(backend.add(a, a)(1, 2) == 2.0f);
}

TEST_CASE("types missing part of the backend interface are rejected", "[exec][concept]") {
    STATIC_REQUIRE_FALSE(weft::compute_backend<int>);
    STATIC_REQUIRE_FALSE(weft::compute_backend<no_matrix>);
    STATIC_REQUIRE_FALSE(weft::compute_backend<missing_kernel>);
    STATIC_REQUIRE_FALSE(weft::compute_backend<no_memory_space>);
    STATIC_REQUIRE_FALSE(weft::exec::backend_identity<no_memory_space>);
    STATIC_REQUIRE_FALSE(weft::exec::loss_kernels<missing_kernel>);
    STATIC_REQUIRE(weft::exec::linear_kernels<missing_kernel>);
}

TEST_CASE("a backend's matrices may store another type than its scalar", "[exec][concept]") {
    STATIC_REQUIRE(std::is_same_v<weft::exec::cpu::matrix::value_type, weft::exec::cpu::scalar>);
    STATIC_REQUIRE(weft::exec::backend_matrices<narrow_backend<std::uint16_t>>);
    STATIC_REQUIRE_FALSE(weft::exec::backend_matrices<narrow_backend<not_bytes>>);
}
