// Where memory lives, as types: host memory (what the CPU backend computes in and what the
// in-process and MPI communicators move) and device memory (a GPU's: what NCCL moves).
// Compute backends and communicators each declare the space they touch, and the engine
// checks at compile time that its communicator can reach its backend's memory, as Kokkos
// checks a memory space against an execution space (SpaceAccessibility).
#pragma once

#include <concepts>
#include <string_view>
#include <type_traits>

namespace weft {

struct host_space {
    static constexpr std::string_view name = "host";
};

struct device_space {
    static constexpr std::string_view name = "device";
};

// A type that names a memory space.
template <class S>
concept memory_space = requires {
    { S::name } -> std::convertible_to<std::string_view>;
} && std::is_empty_v<S>;

// Whether code running against `Access` (a communicator moving, or a backend computing in,
// that space) can read and write memory of `Memory`. Only the same space for now; a
// CUDA-aware MPI would specialize this to reach device memory from the host side.
template <memory_space Access, memory_space Memory>
struct space_accessibility {
    static constexpr bool accessible = std::is_same_v<Access, Memory>;
};

template <class Access, class Memory>
inline constexpr bool accessible_from = space_accessibility<Access, Memory>::accessible;

}  // namespace weft
