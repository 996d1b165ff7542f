// What one stage keeps between a micro-batch's forward and its backward, keyed by
// micro-batch. The stage runner frees an entry as soon as the schedule allows (after B, or
// after W when the backward is split); the program loop sums the live entries of a rank's
// stages to hold the schedule to its memory bound.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>

#include "weft/core/error.hpp"

namespace weft::train {

template <class Entry>
class activation_stash {
public:
    // `stage`: the stage index, for messages.
    explicit activation_stash(int stage = 0) : stage_(stage) {}

    Entry& insert(int microbatch, Entry entry) {
        const auto [it, inserted] = entries_.try_emplace(microbatch, std::move(entry));
        if (!inserted)
            throw invalid_argument("stash key", key_text(microbatch),
                                   "a (stage, micro-batch) is stashed once per step; the program "
                                   "ran its forward twice");
        return it->second;
    }

    [[nodiscard]] Entry& at(int microbatch) {
        const auto it = entries_.find(microbatch);
        if (it == entries_.end())
            throw invalid_argument("stash key", key_text(microbatch),
                                   "backward needs the forward of the same stage and micro-batch "
                                   "to have run first on this rank");
        return it->second;
    }

    [[nodiscard]] bool contains(int microbatch) const { return entries_.contains(microbatch); }

    void erase(int microbatch) {
        if (entries_.erase(microbatch) == 0)
            throw invalid_argument("stash key", key_text(microbatch), "was not stashed");
    }

    void clear() { entries_.clear(); }

    [[nodiscard]] std::size_t live() const { return entries_.size(); }
    // Bytes the live entries hold now (Entry::bytes()).
    [[nodiscard]] std::size_t bytes() const {
        std::size_t total = 0;
        for (const auto& [key, entry] : entries_) total += entry.bytes();
        return total;
    }

private:
    [[nodiscard]] std::string key_text(int microbatch) const {
        return "(stage " + std::to_string(stage_) + ", micro-batch " + std::to_string(microbatch) + ")";
    }

    int stage_;
    std::map<int, Entry> entries_;
};

}  // namespace weft::train
