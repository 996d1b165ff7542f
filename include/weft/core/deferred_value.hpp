// A value a backend may still be computing when it is handed out: a micro-batch's loss on a
// GPU, whose mean a kernel writes after the host has queued it. Reading the value (get(), or
// the conversion to T) waits for it once and keeps it; a backend that computes on the host
// hands out a value that is already there. So the host reads a GPU's results where it
// chooses (the engine: once a step's actions are all queued) instead of stopping the
// device's queue at every micro-batch.
#pragma once

#include <functional>
#include <memory>
#include <utility>

namespace weft {

template <class T>
class deferred_value {
public:
    deferred_value() = default;
    // A value that is already there (implicit: a backend's synchronous result converts).
    deferred_value(T value) : value_(std::move(value)) {}
    // A value `read` will give: called once, at the first read of this value or of any copy
    // of it, from the reading thread.
    [[nodiscard]] static deferred_value when_read(std::function<T()> read) {
        deferred_value v;
        v.pending_ = std::make_shared<pending_read>(pending_read{.read = std::move(read)});
        return v;
    }

    // Waits for the value the first time, then returns the kept copy.
    [[nodiscard]] const T& get() const {
        if (!pending_) return value_;
        if (pending_->read) {
            pending_->value = pending_->read();
            pending_->read = nullptr;
        }
        return pending_->value;
    }
    operator T() const { return get(); }  // implicit: reads like the T it was
    // Whether a read would still wait (or run `read`).
    [[nodiscard]] bool pending() const { return pending_ && pending_->read; }

private:
    // Shared by the copies, so the read runs once for all of them.
    struct pending_read {
        std::function<T()> read;  // empty once it has run
        T value{};
    };
    T value_{};
    std::shared_ptr<pending_read> pending_;
};

}  // namespace weft
