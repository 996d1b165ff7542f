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
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/parameter_registry.hpp"  // split_range, tensor_split: who holds which piece
#include "weft/exec/compute_backend.hpp"

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
    // Whether the communicator behind the functions moves device memory (comm::nccl, or a
    // host-staged one): then a device backend's matrices are summed where they are
    // (allreduce_sum below), not on a host copy.
    bool moves_device_memory = false;

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
    tp.moves_device_memory = std::same_as<typename Comm::memory_space, device_space>;
    return tp;
}

// The tensor-parallel layers' steps between kernels (a reduction over the group, a bias
// added after it, the vocabulary-parallel lookup, and the loss on a backend without loss
// kernels) run on the host, over a matrix's elements as the weights' scalars. On a backend
// whose matrices are host memory of that scalar (exec::cpu) they work on the matrix in
// place, so the CPU's numbers are the same as without these helpers. On any other backend
// (exec::cuda's bf16 device matrices) they work on a host copy, through the concept's
// copy_to_host and copy_from_host: fp32 on the host, rounded once when it goes back. That is
// the portable path; a backend's own kernels and a device communicator are the fast one.
template <class Backend>
concept host_matrices = std::same_as<typename Backend::memory_space, host_space> &&
    std::same_as<typename Backend::matrix::value_type, typename Backend::scalar>;

namespace detail {

// The elements of a host matrix, row after row (const for a const matrix).
template <class Matrix>
[[nodiscard]] auto elements(Matrix& m) {
    using plain = std::remove_cvref_t<Matrix>;
    if constexpr (requires { plain::IsRowMajor; })
        static_assert(plain::IsRowMajor, "weft: tensor parallelism needs row-major matrices");
    return std::span(m.data(), std::size_t(m.size()));
}

}  // namespace detail

// read(span<const scalar>) over m's elements: in place for host_matrices, else a host copy.
template <compute_backend Backend, class Read>
void read_on_host(Backend& backend, const typename Backend::matrix& m, Read&& read) {
    using scalar = typename Backend::scalar;
    if constexpr (host_matrices<Backend>) {
        std::forward<Read>(read)(std::span<const scalar>(detail::elements(m)));
    } else {
        std::vector<scalar> host(std::size_t(m.size()));
        backend.copy_to_host(m, std::span<scalar>(host));
        std::forward<Read>(read)(std::span<const scalar>(host));
    }
}

// update(span<scalar>) over m's elements: in place for host_matrices, else on a host copy
// that is written back afterwards.
template <compute_backend Backend, class Update>
void update_on_host(Backend& backend, typename Backend::matrix& m, Update&& update) {
    using scalar = typename Backend::scalar;
    if constexpr (host_matrices<Backend>) {
        std::forward<Update>(update)(detail::elements(m));
    } else {
        std::vector<scalar> host(std::size_t(m.size()));
        backend.copy_to_host(m, std::span<scalar>(host));
        std::forward<Update>(update)(std::span<scalar>(host));
        backend.copy_from_host(std::span<const scalar>(host), m);
    }
}

// A new rows x cols matrix whose every element fill(span<scalar>) writes on the host (its
// elements start unspecified).
template <compute_backend Backend, class Fill>
[[nodiscard]] typename Backend::matrix make_on_host(Backend& backend, int rows, int cols, Fill&& fill) {
    using scalar = typename Backend::scalar;
    typename Backend::matrix m(rows, cols);
    if constexpr (host_matrices<Backend>) {
        std::forward<Fill>(fill)(detail::elements(m));
    } else {
        std::vector<scalar> host(std::size_t(rows) * std::size_t(cols));
        std::forward<Fill>(fill)(std::span<scalar>(host));
        backend.copy_from_host(std::span<const scalar>(host), m);
    }
    return m;
}

// Sums m over the group in place, then adds `bias` to each of its rows (none where empty: a
// row-parallel layer's bias, added once after the sum). Every rank ends with the same values,
// bit for bit. On a device backend with exec::matrix_reduction_kernels whose group moves
// device memory, in the backend's memory: the same arithmetic (fp32 sum, fp32 bias, one
// rounding) without the host copy and the waits it costs. On a host copy otherwise.
template <compute_backend Backend>
void allreduce_sum(Backend& backend, const tp_group<typename Backend::scalar>& tp, typename Backend::matrix& m,
                   std::span<const typename Backend::scalar> bias = {}) {
    using scalar = typename Backend::scalar;
    if (tp.size == 1 && bias.empty()) return;
    if (!bias.empty())
        require(std::size_t(backend.cols(m)) == bias.size(), "allreduce_sum: bias.size()", bias.size(),
                "must equal the matrix's width " + std::to_string(backend.cols(m)));
    if constexpr (std::same_as<typename Backend::memory_space, device_space> &&
                  exec::matrix_reduction_kernels<Backend>) {
        if (tp.moves_device_memory) {
            backend.reduce_matrix(m, bias, [&tp](std::span<scalar> values) { tp.allreduce_sum(values); });
            return;
        }
    }
    update_on_host(backend, m, [&](std::span<scalar> values) {
        tp.allreduce_sum(values);
        if (bias.empty()) return;
        for (std::size_t i = 0; i < values.size(); i += bias.size())
            for (std::size_t c = 0; c < bias.size(); ++c) values[i + c] += bias[c];
    });
}

}  // namespace weft::nn
