// The communicator concept: what the engine needs from a communication backend
// (byte-level point-to-point, typed collectives, splitting into groups), so that
// local threads, MPI and NCCL are interchangeable policies.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"

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
template <class C>
concept communicator =
    std::movable<C> && requires(C& c, const C& cc, std::span<const std::byte> out,
                                std::span<std::byte> in, std::span<float> f,
                                std::span<double> d, std::span<const float> cf,
                                std::span<const double> cd, int i) {
        { cc.rank() } -> std::same_as<int>;
        { cc.size() } -> std::same_as<int>;
        typename C::request;
        { c.isend(out, i, i) } -> std::same_as<typename C::request>;
        { c.irecv(in, i, i) } -> std::same_as<typename C::request>;
        requires requires(typename C::request& r) { r.wait(); };
        c.allreduce_sum(f);
        c.allreduce_sum(d);
        c.allgather(cf, f);
        c.allgather(cd, d);
        c.reduce_scatter_sum(cf, f);
        c.reduce_scatter_sum(cd, d);
        { c.iallreduce_sum(f) } -> std::same_as<typename C::request>;
        { c.iallreduce_sum(d) } -> std::same_as<typename C::request>;
        { c.iallgather(cf, f) } -> std::same_as<typename C::request>;
        { c.iallgather(cd, d) } -> std::same_as<typename C::request>;
        { c.ireduce_scatter_sum(cf, f) } -> std::same_as<typename C::request>;
        { c.ireduce_scatter_sum(cd, d) } -> std::same_as<typename C::request>;
        c.broadcast(in, i);
        c.barrier();
        { c.split(i, i) } -> std::same_as<C>;
    };

// Instantiate (e.g. as a base or member) where a policy is taken, so that a type
// which is not a communicator yields this one message rather than a page of
// substitution failures.
template <class C>
struct require_communicator {
    static_assert(communicator<C>,
                  "weft: this type does not model weft::communicator (it needs rank(), size(), "
                  "a request type with wait(), isend, irecv, allreduce_sum, allgather, "
                  "reduce_scatter_sum and their non-blocking i-forms, broadcast, barrier "
                  "and split); see weft/comm/communicator.hpp");
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
