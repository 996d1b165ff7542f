// A joiner's new state buffers, made and put in memory before the switch that fills them.
//
// A switch makes its new buffers lazily (core/state_vector.hpp's lazy_zeros): a page takes
// memory when the first data lands in it, so that a rank that holds state gives back as it
// takes and stays within its memory bound (elastic/transfer.hpp). A process that joins a
// running job holds nothing before the move: it can take its whole new state at once, and
// do so while the old ranks still train (run/joiner_start.hpp), instead of faulting every
// page in during the move, which stalls them all. Each buffer is zero-filled where it lives
// (the state memory's own zero: the host's memset, or on the GPU for its managed memory), so
// that its pages are in memory; the switch takes them by size in place of lazy ones.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "weft/core/state_memory.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/elastic/page_ledger.hpp"

namespace weft::elastic {

// Elements of a stage's buffers in layout `l`, as a switch makes them (elastic/transfer.hpp)
// and a reserve makes them ahead: the flat buffer (padded to the ZeRO ranges; the gradients,
// which ZeRO 0 and 1 keep between steps), the parameters (the ZeRO-3 range, or the flat
// buffer), and each optimizer state tensor (the stage's tensors, or from ZeRO-1 on the valid
// part of the range).
[[nodiscard]] inline std::size_t flat_elements(const layout& l, const stage_holding& h) {
    return l.config().zero_stage() == 0 ? h.registry.total_size() : h.range.padded;
}
[[nodiscard]] inline std::size_t parameter_elements(const layout& l, const stage_holding& h) {
    return l.config().zero_stage() == 3 ? h.range.size : flat_elements(l, h);
}
[[nodiscard]] inline std::size_t moment_elements(const layout& l, const stage_holding& h) {
    return l.config().zero_stage() == 0 ? h.registry.total_size() : h.range.valid();
}

// The sizes of every buffer a rank holds in layout `l` between steps, with
// `optimizer_tensors` optimizer state tensors per stage.
[[nodiscard]] inline std::vector<std::size_t> state_buffer_sizes(const layout& l, int rank,
                                                                 std::size_t optimizer_tensors) {
    std::vector<std::size_t> out;
    for (const stage_holding& h : l.holdings(rank)) {
        out.push_back(parameter_elements(l, h));
        if (l.config().zero_stage() <= 1) out.push_back(flat_elements(l, h));
        for (std::size_t k = 0; k < optimizer_tensors; ++k) out.push_back(moment_elements(l, h));
    }
    return out;
}

template <class Scalar>
class reserved_buffers {
public:
    reserved_buffers() = default;

    // A buffer of each of `sizes` elements, in `memory`, every page of it in memory.
    reserved_buffers(const std::vector<std::size_t>& sizes, const state_memory& memory) {
        for (const std::size_t elements : sizes) {
            state_vector<Scalar> buffer = lazy_zeros<Scalar>(elements, memory);
            memory.fill_zero(buffer.data(), buffer.size() * sizeof(Scalar));
            bytes_ += detail::state_buffer_bytes(buffer);
            buffers_.push_back(std::move(buffer));
        }
    }

    // One of exactly `elements` elements, if one is left (it leaves the reserve).
    [[nodiscard]] std::optional<state_vector<Scalar>> take(std::size_t elements) {
        const auto it = std::find_if(buffers_.begin(), buffers_.end(),
                                     [&](const state_vector<Scalar>& b) { return b.size() == elements; });
        if (it == buffers_.end()) return std::nullopt;
        state_vector<Scalar> out = std::move(*it);
        buffers_.erase(it);
        bytes_ -= detail::state_buffer_bytes(out);
        return out;
    }

    // Frees the buffers beyond `sizes` (a multiset: one buffer of each entry is kept), e.g.
    // an optimizer state tensor that no rank holds yet.
    void keep_only(std::vector<std::size_t> sizes) {
        std::vector<state_vector<Scalar>> kept;
        for (state_vector<Scalar>& b : buffers_) {
            const auto wanted = std::find(sizes.begin(), sizes.end(), b.size());
            if (wanted == sizes.end()) {
                bytes_ -= detail::state_buffer_bytes(b);
                continue;
            }
            sizes.erase(wanted);
            kept.push_back(std::move(b));
        }
        buffers_ = std::move(kept);
    }

    // The memory the buffers left hold.
    [[nodiscard]] std::size_t bytes() const { return bytes_; }
    [[nodiscard]] bool empty() const { return buffers_.empty(); }

private:
    std::vector<state_vector<Scalar>> buffers_;
    std::size_t bytes_ = 0;
};

}  // namespace weft::elastic
