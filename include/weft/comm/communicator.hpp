// The communicator concept: what the engine needs from a communication backend (the memory
// space it moves, byte-level point-to-point, typed collectives, splitting into groups), so
// that local threads, MPI and NCCL are interchangeable policies. It is composed of small
// named concepts; require_communicator names the first one a type misses.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"

namespace weft::comm {

// Tags a message may carry: MPI guarantees MPI_TAG_UB >= 32767, so every backend
// accepts exactly this range and a program that runs on one runs on all.
inline constexpr int max_tag = 32767;

// Semantics every model must keep (the shared checks in tests/comm/ hold each
// backend to them):
// * isend(data, dest, tag) / irecv(buffer, source, tag) return a move-only request;
//   request.wait() completes it. Waiting twice or on a moved-from request is harmless.
// * per (source, tag) messages do not overtake each other; a receive whose buffer
//   size differs from the message size is a weft::error naming both sizes.
// * collectives are called by every rank of the group in the same order with the
//   same length; allreduce_sum works in place and leaves the same values on all ranks.
// * allgather(mine, all): all[r*n, (r+1)*n) is rank r's `mine`; reduce_scatter_sum(all,
//   mine): mine is the sum over ranks of their block rank() of `all`. Both need
//   all.size() == size() * mine.size().
// * the i-forms (iallreduce_sum, iallgather, ireduce_scatter_sum) start the collective
//   and return a request; the buffers belong to it until wait(). Every rank starts its
//   collectives, blocking or not, in the same order.
// * split(color, key) works like MPI_Comm_split with color >= 0.
// Rank, size and the memory space whose buffers it moves.
template <class C>
concept ranked = std::movable<C> && requires(const C& c) {
    typename C::memory_space;
    { c.rank() } -> std::same_as<int>;
    { c.size() } -> std::same_as<int>;
} && memory_space<typename C::memory_space>;

// Tagged, non-blocking byte messages completed by a move-only request.
template <class C>
concept point_to_point = ranked<C> && requires(C& c, std::span<const std::byte> out, std::span<std::byte> in, int i) {
    typename C::request;
    { c.isend(out, i, i) } -> std::same_as<typename C::request>;
    { c.irecv(in, i, i) } -> std::same_as<typename C::request>;
    requires requires(typename C::request& r) { r.wait(); };
};

// The blocking collectives, for float and double, plus broadcast and barrier.
template <class C>
concept collectives = ranked<C> && requires(C& c, std::span<float> f, std::span<double> d,
                                            std::span<const float> cf, std::span<const double> cd,
                                            std::span<std::byte> bytes, int i) {
    c.allreduce_sum(f);
    c.allreduce_sum(d);
    c.allgather(cf, f);
    c.allgather(cd, d);
    c.reduce_scatter_sum(cf, f);
    c.reduce_scatter_sum(cd, d);
    c.broadcast(bytes, i);
    c.barrier();
};

// The non-blocking collectives the engine overlaps with compute.
template <class C>
concept nonblocking_collectives = point_to_point<C> &&
    requires(C& c, std::span<float> f, std::span<double> d, std::span<const float> cf, std::span<const double> cd) {
        { c.iallreduce_sum(f) } -> std::same_as<typename C::request>;
        { c.iallreduce_sum(d) } -> std::same_as<typename C::request>;
        { c.iallgather(cf, f) } -> std::same_as<typename C::request>;
        { c.iallgather(cd, d) } -> std::same_as<typename C::request>;
        { c.ireduce_scatter_sum(cf, f) } -> std::same_as<typename C::request>;
        { c.ireduce_scatter_sum(cd, d) } -> std::same_as<typename C::request>;
    };

// Sub-groups, as MPI_Comm_split.
template <class C>
concept splittable = ranked<C> && requires(C& c, int i) {
    { c.split(i, i) } -> std::same_as<C>;
};

template <class C>
concept communicator =
    ranked<C> && point_to_point<C> && collectives<C> && nonblocking_collectives<C> && splittable<C>;

namespace detail {
// The first part of the interface C lacks, as a failed static_assert; true otherwise.
template <class C>
constexpr bool diagnose_communicator() {
    if constexpr (!ranked<C>)
        static_assert(ranked<C>,
                      "weft: this type does not model weft::communicator: it needs rank(), size(), a "
                      "`memory_space` (weft::host_space or weft::device_space) and must be movable "
                      "(weft::comm::ranked); see weft/comm/communicator.hpp");
    else if constexpr (!point_to_point<C>)
        static_assert(point_to_point<C>,
                      "weft: this type does not model weft::communicator: it needs isend and irecv returning a "
                      "`request` with wait() (weft::comm::point_to_point); see weft/comm/communicator.hpp");
    else if constexpr (!collectives<C>)
        static_assert(collectives<C>,
                      "weft: this type does not model weft::communicator: it needs allreduce_sum, allgather, "
                      "reduce_scatter_sum (float and double), broadcast and barrier (weft::comm::collectives); see "
                      "weft/comm/communicator.hpp");
    else if constexpr (!nonblocking_collectives<C>)
        static_assert(nonblocking_collectives<C>,
                      "weft: this type does not model weft::communicator: it needs iallreduce_sum, iallgather and "
                      "ireduce_scatter_sum returning a request (weft::comm::nonblocking_collectives); see "
                      "weft/comm/communicator.hpp");
    else if constexpr (!splittable<C>)
        static_assert(splittable<C>,
                      "weft: this type does not model weft::communicator: it needs split(color, key) returning the "
                      "same type (weft::comm::splittable); see weft/comm/communicator.hpp");
    return true;
}
}  // namespace detail

// Instantiate (e.g. as a base or member) where a policy is taken, so that a type which is
// not a communicator yields one message naming what it lacks rather than a page of
// substitution failures.
template <class C>
struct require_communicator {
    static_assert(detail::diagnose_communicator<C>());
};

namespace detail {

// Argument checks shared by the backends, so their messages read the same.
inline void check_tag(int tag) {
    require(tag >= 0 && tag <= max_tag, "tag", tag,
            "must be in [0, " + std::to_string(max_tag) + "] (the range MPI guarantees)");
}

inline void check_peer(std::string_view parameter, int peer, int size) {
    require(peer >= 0 && peer < size, parameter, peer,
            "must be a rank of this communicator, in [0, " + std::to_string(size) + ")");
}

}  // namespace detail

}  // namespace weft::comm

namespace weft {
using comm::communicator;
}  // namespace weft
