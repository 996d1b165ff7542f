// posting_order<Inner>: a host communicator made to pair messages as NCCL does, per peer in
// posting order whatever the tag, by sending and receiving everything with tag 0 (Inner
// keeps order per (source, tag)). It lets CPU tests run the engine under NCCL's matching
// rule, which comm::nccl itself cannot without a GPU per rank.
//
// posting_order<Inner>(inner, refused_tags) also refuses the messages of the given tags, as
// comm::nccl refuses host memory in sends and receives: a test names the tags of the
// protocols that send host memory point to point (train::detail::checkpoint_tag,
// elastic::switch_tag), which belong on comm::host_side (comm::with_host's host
// communicator), so that only the pipeline's activations may come here.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/core/error.hpp"

namespace weft_test {

template <weft::communicator Inner>
class posting_order {
public:
    using memory_space = typename Inner::memory_space;
    using request = typename Inner::request;
    static constexpr weft::comm::message_matching matching = weft::comm::message_matching::in_posting_order;

    explicit posting_order(Inner inner, std::vector<int> refused_tags = {})
        : inner_(std::move(inner)), refused_tags_(std::move(refused_tags)) {}

    [[nodiscard]] int rank() const { return inner_.rank(); }
    [[nodiscard]] int size() const { return inner_.size(); }

    // The tag is checked as every communicator checks it, then dropped.
    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        check(tag);
        return inner_.isend(data, dest, 0);
    }
    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        check(tag);
        return inner_.irecv(buffer, source, 0);
    }

    template <class T>
    void allreduce_sum(std::span<T> values) {
        inner_.allreduce_sum(values);
    }
    template <class T>
    void allgather(std::span<const T> mine, std::span<T> all) {
        inner_.allgather(mine, all);
    }
    template <class T>
    void reduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        inner_.reduce_scatter_sum(all, mine);
    }
    void broadcast(std::span<std::byte> bytes, int root) { inner_.broadcast(bytes, root); }
    void barrier() { inner_.barrier(); }

    template <class T>
    [[nodiscard]] request iallreduce_sum(std::span<T> values) {
        return inner_.iallreduce_sum(values);
    }
    template <class T>
    [[nodiscard]] request iallgather(std::span<const T> mine, std::span<T> all) {
        return inner_.iallgather(mine, all);
    }
    template <class T>
    [[nodiscard]] request ireduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        return inner_.ireduce_scatter_sum(all, mine);
    }

    [[nodiscard]] posting_order split(int color, int key) {
        return posting_order(inner_.split(color, key), refused_tags_);
    }

private:
    void check(int tag) const {
        weft::comm::detail::check_tag(tag);
        if (std::ranges::find(refused_tags_, tag) != refused_tags_.end())
            throw weft::error("a message of tag " + std::to_string(tag) +
                              " (a protocol that sends host memory) came to the device communicator: it belongs "
                              "on comm::host_side");
    }

    Inner inner_;
    std::vector<int> refused_tags_;
};

}  // namespace weft_test
