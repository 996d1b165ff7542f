// What a rank keeps between a micro-batch's forward and its backward, keyed by
// (stage, micro-batch). The engine frees an entry as soon as the schedule allows
// (after B, or after W when the backward is split) and the stash counts how many
// micro-batches were alive at once, so tests can hold the schedule to its memory bound.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "weft/core/error.hpp"

namespace weft::train {

template <class Entry>
class activation_stash {
public:
    Entry& insert(int stage, int microbatch, Entry entry) {
        const auto [it, inserted] = entries_.try_emplace({stage, microbatch}, std::move(entry));
        if (!inserted)
            throw invalid_argument("stash key", key_text(stage, microbatch),
                                   "a (stage, micro-batch) is stashed once per step; the program "
                                   "ran its forward twice");
        peak_ = std::max(peak_, entries_.size());
        return it->second;
    }

    [[nodiscard]] Entry& at(int stage, int microbatch) {
        const auto it = entries_.find({stage, microbatch});
        if (it == entries_.end())
            throw invalid_argument("stash key", key_text(stage, microbatch),
                                   "backward needs the forward of the same stage and micro-batch "
                                   "to have run first on this rank");
        return it->second;
    }

    void erase(int stage, int microbatch) {
        if (entries_.erase({stage, microbatch}) == 0)
            throw invalid_argument("stash key", key_text(stage, microbatch), "was not stashed");
    }

    [[nodiscard]] std::size_t live() const { return entries_.size(); }
    // Bytes the live entries hold now (Entry::bytes()); the engine samples it after every
    // compute action for the memory report's peak activations.
    [[nodiscard]] std::size_t bytes() const {
        std::size_t total = 0;
        for (const auto& [key, entry] : entries_) total += entry.bytes();
        return total;
    }
    [[nodiscard]] std::size_t peak() const { return peak_; }
    void reset_peak() { peak_ = entries_.size(); }

private:
    static std::string key_text(int stage, int microbatch) {
        return "(stage " + std::to_string(stage) + ", micro-batch " + std::to_string(microbatch) + ")";
    }

    std::map<std::pair<int, int>, Entry> entries_;
    std::size_t peak_ = 0;
};

}  // namespace weft::train
