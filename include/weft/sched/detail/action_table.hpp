// A dense table with one cell per (kind, stage, micro-batch) for the kinds that occur at
// most once per (stage, micro-batch), F .. RECV_B: validation keeps action positions in
// it, the simulator finish times, so a dependency check is a lookup instead of a search.
#pragma once

#include <cstddef>
#include <vector>

#include "weft/sched/action.hpp"

namespace weft::sched::detail {

inline constexpr int tracked_kinds = 8;

[[nodiscard]] constexpr bool is_tracked(action_kind kind) {
    return static_cast<int>(kind) < tracked_kinds;
}

template <class Cell>
class action_table {
public:
    constexpr action_table(int stages, int microbatches, Cell fill)
        : stages_(stages),
          microbatches_(microbatches),
          cells_(static_cast<std::size_t>(tracked_kinds) * static_cast<std::size_t>(stages) *
                     static_cast<std::size_t>(microbatches),
                 fill) {}

    [[nodiscard]] constexpr Cell& operator()(action_kind kind, int stage, int microbatch) {
        return cells_[offset(kind, stage, microbatch)];
    }
    [[nodiscard]] constexpr Cell operator()(action_kind kind, int stage, int microbatch) const {
        return cells_[offset(kind, stage, microbatch)];
    }

private:
    [[nodiscard]] constexpr std::size_t offset(action_kind kind, int stage, int microbatch) const {
        return (static_cast<std::size_t>(kind) * static_cast<std::size_t>(stages_) +
                static_cast<std::size_t>(stage)) *
                   static_cast<std::size_t>(microbatches_) +
               static_cast<std::size_t>(microbatch);
    }

    int stages_;
    int microbatches_;
    std::vector<Cell> cells_;
};

}  // namespace weft::sched::detail
