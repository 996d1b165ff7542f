// A step's report (its printed line and its JSON log line), held back until the step can no
// longer be trained again. Under --elastic with MPI's fault tolerance a failure rolls the run
// back to the last boundary the mirror committed, and the steps after it are trained again; a
// step printed at once would then be reported twice (and the one printed first did not
// count). Held until the mirror commits a later boundary, each step is reported once, as it
// counted. Without holding (any other run) a line goes out at once.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <utility>

namespace weft::run {

struct step_lines {
    long long step = 0;
    std::string text;  // the printed line
    std::string json;  // the --log-json line
};

class held_step_lines {
public:
    using emit_fn = std::function<void(const step_lines&)>;

    held_step_lines(bool holding, emit_fn emit) : holding_(holding), emit_(std::move(emit)) {}
    held_step_lines(const held_step_lines&) = delete;
    held_step_lines& operator=(const held_step_lines&) = delete;
    // Whatever is still held goes out: the run ended (or failed) with those steps trained.
    ~held_step_lines() {
        try {
            release_all();
        } catch (...) {  // a report lost at exit is better than an exception from a destructor
        }
    }

    void add(step_lines lines) {
        if (!holding_) {
            emit_(lines);
            return;
        }
        held_.push_back(std::move(lines));
    }
    // The mirror committed the boundary before step `boundary`: every step before it stays.
    void release_before(long long boundary) {
        while (!held_.empty() && held_.front().step < boundary) {
            emit_(held_.front());
            held_.pop_front();
        }
    }
    void release_all() {
        while (!held_.empty()) {
            emit_(held_.front());
            held_.pop_front();
        }
    }
    // The run rolled back to the boundary before `step`: the steps from it on are trained
    // again, and their first reports are dropped.
    void drop_from(long long step) {
        while (!held_.empty() && held_.back().step >= step) held_.pop_back();
    }
    [[nodiscard]] std::size_t held() const { return held_.size(); }

private:
    bool holding_;
    emit_fn emit_;
    std::deque<step_lines> held_;
};

}  // namespace weft::run
