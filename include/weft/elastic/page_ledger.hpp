// The memory a layout switch holds, page by page.
//
// A switch empties the old state's buffers into the new one's. A paged state buffer
// (core/state_vector.hpp) takes a page of memory when it is first written and can give one
// back once nothing is left to read from it; a page_ledger follows which pages of one buffer
// hold memory, gives back the pages of an old buffer as their last reads are done, and
// keeps the memory_meter's count of what the rank holds. A heap buffer (a small one) holds
// its whole size from allocation to free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "weft/core/state_vector.hpp"

namespace weft::elastic::detail {

// Bytes held now and at most.
class memory_meter {
public:
    void add(std::size_t bytes) {
        now_ += bytes;
        peak_ = std::max(peak_, now_);
    }
    void remove(std::size_t bytes) { now_ -= std::min(now_, bytes); }
    [[nodiscard]] std::size_t now() const { return now_; }
    [[nodiscard]] std::size_t peak() const { return peak_; }

private:
    std::size_t now_ = 0;
    std::size_t peak_ = 0;
};

// The memory a state buffer of `capacity` elements holds once written throughout: its pages,
// when it is paged.
template <class Scalar>
[[nodiscard]] std::size_t state_buffer_bytes(std::size_t capacity) {
    const std::size_t bytes = capacity * sizeof(Scalar);
    if (bytes < state_allocator<Scalar>::paged_bytes) return bytes;
    const std::size_t page = memory_page_bytes();
    return (bytes + page - 1) / page * page;
}
template <class Scalar>
[[nodiscard]] std::size_t state_buffer_bytes(const state_vector<Scalar>& buffer) {
    return state_buffer_bytes<Scalar>(buffer.capacity());
}

template <class Scalar>
class page_ledger {
public:
    page_ledger() = default;

    // An old buffer, whole in memory (the meter counts it already). Every read of it is
    // announced (will_read) before the first happens.
    [[nodiscard]] static page_ledger emptying(state_vector<Scalar>& buffer, memory_meter& meter) {
        page_ledger ledger(buffer, meter);
        ledger.held_.assign(ledger.pages(), true);
        ledger.pending_.assign(ledger.pages(), 0);
        return ledger;
    }
    // A new buffer from lazy_zeros(): a paged one holds nothing until written, a heap one
    // holds its size (added to the meter here).
    [[nodiscard]] static page_ledger filling(state_vector<Scalar>& buffer, memory_meter& meter) {
        page_ledger ledger(buffer, meter);
        ledger.held_.assign(ledger.pages(), !ledger.paged_);
        if (!ledger.paged_) meter.add(state_buffer_bytes(buffer));
        return ledger;
    }

    // Emptying: elements [first, first + count) will be read once more.
    void will_read(std::size_t first, std::size_t count) {
        for_each_page(first, count, [&](std::size_t page, std::size_t elements) { pending_[page] += elements; });
    }
    // Emptying: gives back every page nothing will read.
    void release_unread() {
        for (std::size_t page = 0; page < pending_.size(); ++page)
            if (pending_[page] == 0) release(page);
        give_back();
    }
    // Emptying: elements [first, first + count) have been read; pages with no reads left are
    // given back at the next give_back().
    void read(std::size_t first, std::size_t count) {
        for_each_page(first, count, [&](std::size_t page, std::size_t elements) {
            pending_[page] -= std::min(pending_[page], elements);
            if (pending_[page] == 0) release(page);
        });
    }
    // Hands the pages whose last read is done to the kernel, runs of neighbours in one call
    // each, and takes them off the meter. A switch calls it after each message, so that
    // scattered reads (tensor-parallel slices) cost a few calls rather than one a page.
    void give_back() {
        if (releasing_.empty()) return;
        std::sort(releasing_.begin(), releasing_.end());
        for (std::size_t i = 0; i < releasing_.size();) {
            std::size_t j = i + 1;
            while (j < releasing_.size() && releasing_[j] == releasing_[j - 1] + 1) ++j;
            release_page_range(*buffer_, releasing_[i], j - i);
            meter_->remove((j - i) * page_);
            i = j;
        }
        releasing_.clear();
    }
    // A new buffer made ahead, every page already in memory (elastic/reserved_buffers.hpp; the
    // meter counts it already).
    [[nodiscard]] static page_ledger filled_ahead(state_vector<Scalar>& buffer, memory_meter& meter) {
        page_ledger ledger(buffer, meter);
        ledger.held_.assign(ledger.pages(), true);
        return ledger;
    }

    // Filling: elements [first, first + count) are about to be written; their pages take memory.
    void written(std::size_t first, std::size_t count) {
        if (!paged_) return;
        for_each_page(first, count, [&](std::size_t page, std::size_t /*elements*/) {
            if (held_[page]) return;
            held_[page] = true;
            meter_->add(page_);
        });
    }
    // The buffer is about to be freed: what it still holds leaves the meter.
    void forget() {
        if (meter_ == nullptr) return;
        if (!paged_) {
            if (!held_.empty() && held_.front()) meter_->remove(state_buffer_bytes<Scalar>(capacity_));
        } else {
            for (std::size_t page = 0; page < held_.size(); ++page)
                if (held_[page]) meter_->remove(page_);
            meter_->remove(releasing_.size() * page_);
            releasing_.clear();
        }
        held_.clear();
        meter_ = nullptr;
    }

private:
    page_ledger(state_vector<Scalar>& buffer, memory_meter& meter)
        : buffer_(&buffer),
          meter_(&meter),
          paged_(is_paged(buffer)),
          page_(memory_page_bytes()),
          capacity_(buffer.capacity()) {}

    // A heap buffer is one "page" of its whole size.
    [[nodiscard]] std::size_t pages() const {
        if (capacity_ == 0) return 0;
        if (!paged_) return 1;
        return (capacity_ * sizeof(Scalar) + page_ - 1) / page_;
    }

    template <class Fn>
    void for_each_page(std::size_t first, std::size_t count, Fn&& fn) const {
        if (count == 0) return;
        if (!paged_) {
            fn(0, count);
            return;
        }
        const std::size_t per_page = page_ / sizeof(Scalar);
        for (std::size_t at = first; at < first + count;) {
            const std::size_t page = at / per_page;
            const std::size_t end = std::min(first + count, (page + 1) * per_page);
            fn(page, end - at);
            at = end;
        }
    }

    // A page with no reads left: a heap buffer leaves the meter at once (it is freed whole
    // later); a page waits for give_back().
    void release(std::size_t page) {
        if (!held_[page]) return;
        held_[page] = false;
        if (!paged_) {
            meter_->remove(state_buffer_bytes<Scalar>(capacity_));
            return;
        }
        releasing_.push_back(page);
    }

    state_vector<Scalar>* buffer_ = nullptr;
    memory_meter* meter_ = nullptr;
    bool paged_ = false;
    std::size_t page_ = 0;
    std::size_t capacity_ = 0;
    std::vector<std::size_t> releasing_;  // pages with no reads left, not yet given back
    std::vector<bool> held_;             // per page: holds memory
    std::vector<std::size_t> pending_;  // emptying, per page: elements still to be read
};

}  // namespace weft::elastic::detail
