// Tensor parallelism (Megatron-style, without sequence parallelism): the ranks of a tp
// group each hold a slice of every block's weights, and activations between blocks are
// replicated on all of them. tp_group is what the layers call to reduce partial results;
// make_tp_group builds one over any weft::communicator.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weft/comm/communicator.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/nn/parameter_registry.hpp"  // split_range, tensor_split: who holds which piece

namespace weft::nn {

// A tensor-parallel group as the layers see it, type-erased so that nn/ stays free of
// communicator templates. Default-constructed: no tensor parallelism (size 1), and the
// operations never reach a communicator. The communicator a group was made from must
// outlive the group and every copy of it (stages and their layers hold copies).
template <class Scalar>
struct tp_group {
    int rank = 0;
    int size = 1;
    // Set by make_tp_group; empty for size 1 (and for the rank/size-only groups that
    // describe a layout without communicating).
    std::function<void(std::span<Scalar>)> allreduce_sum_fn;
    std::function<void(std::span<const Scalar>, std::span<Scalar>)> allgather_fn;

    // A group that only says where this rank sits (rank of size) and never communicates:
    // enough to build a stage's layout or registry, not to run it.
    [[nodiscard]] static tp_group without_communication(int rank, int size) {
        tp_group tp;
        tp.rank = rank;
        tp.size = size;
        return tp;
    }

    // In place; every rank of the group ends with the same sum, bit for bit.
    void allreduce_sum(std::span<Scalar> values) const {
        if (size == 1) return;
        require(bool(allreduce_sum_fn), "tp_group.allreduce_sum", "not set",
                "must be set for size " + std::to_string(size) + " (build the group with make_tp_group)");
        allreduce_sum_fn(values);
    }
    // all.size() == size * mine.size(); rank r's block lands at [r * n, (r + 1) * n).
    void allgather(std::span<const Scalar> mine, std::span<Scalar> all) const {
        require(all.size() == mine.size() * std::size_t(size), "tp_group.allgather: all.size()", all.size(),
                "must equal size * mine.size() = " + std::to_string(mine.size() * std::size_t(size)));
        if (size == 1) {
            std::copy(mine.begin(), mine.end(), all.begin());
            return;
        }
        require(bool(allgather_fn), "tp_group.allgather", "not set",
                "must be set for size " + std::to_string(size) + " (build the group with make_tp_group)");
        allgather_fn(mine, all);
    }
};

// The tp group over all ranks of `group` (typically the tp communicator of a process
// grid). Keeps a reference to `group`: it must outlive the returned tp_group.
template <class Scalar, communicator Comm>
[[nodiscard]] tp_group<Scalar> make_tp_group(Comm& group) {
    tp_group<Scalar> tp;
    tp.rank = group.rank();
    tp.size = group.size();
    if (tp.size == 1) return tp;
    tp.allreduce_sum_fn = [&group](std::span<Scalar> values) { group.allreduce_sum(values); };
    tp.allgather_fn = [&group](std::span<const Scalar> mine, std::span<Scalar> all) { group.allgather(mine, all); };
    return tp;
}

// Backends whose matrices the tensor-parallel layers' host-side steps can read and write as
// weights' scalars: host memory, elements of the scalar type (exec::cpu). Those steps (a
// vocabulary lookup, a bias after a reduction, the reductions themselves, the vocabulary-
// parallel loss) are not backend kernels yet, so the layers compile for other backends
// (exec::cuda's bf16 device matrices) with the steps replaced by an error, and the engine
// refuses tp > 1 on them before a step runs (train/layout_engine.hpp).
template <class Backend>
concept host_tensor_parallel = std::same_as<typename Backend::memory_space, host_space> &&
    std::same_as<typename Backend::matrix::value_type, typename Backend::scalar>;

namespace detail {

// What a tensor-parallel step on a backend outside host_tensor_parallel throws.
[[noreturn]] inline void tensor_parallel_not_built(std::string_view backend, std::string_view step) {
    throw error("weft: " + std::string(step) + " with tp > 1 is not built for the " + std::string(backend) +
                " backend (its tensor-parallel steps run on the host; see weft/nn/tensor_parallel.hpp)");
}

// The tensor-parallel layers read and write activations element by element (vocabulary
// lookups, bias after a reduction, the reductions themselves), so they need a matrix in
// host memory, contiguous and row-major, such as the CPU backend's: its data() and size(),
// which the compute-backend concept guarantees.
template <class Matrix>
concept host_row_major_matrix = requires(Matrix& m) {
    { m.data() };
    { m.size() };
};

// The elements of m, row after row (const for a const matrix).
template <host_row_major_matrix Matrix>
[[nodiscard]] auto elements(Matrix& m) {
    using plain = std::remove_cvref_t<Matrix>;
    if constexpr (requires { plain::IsRowMajor; })
        static_assert(plain::IsRowMajor, "weft: tensor parallelism needs row-major matrices");
    return std::span(m.data(), std::size_t(m.size()));
}

}  // namespace detail

}  // namespace weft::nn
