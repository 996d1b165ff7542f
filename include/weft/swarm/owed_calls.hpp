// The calls a trainer awaits from one SWARM worker, and the sum of their timeouts. A worker
// serves its calls in turn, so a call sent now is due after the calls ahead of it have had
// their timeouts and then its own: the real trainer (swarm/net/trainer.hpp) and the
// simulated one (swarm/sim/virtual_swarm.hpp) keep this one account, so they time out alike.
#pragma once

#include <algorithm>

namespace weft::swarm {

class owed_calls {
public:
    // How long from now a new call with `timeout_seconds` of its own may take.
    [[nodiscard]] double due_after(double timeout_seconds) const { return seconds_ + timeout_seconds; }
    // The call was sent: calls after it wait behind its timeout too.
    void add(double timeout_seconds) {
        ++count_;
        seconds_ += timeout_seconds;
    }
    // A call sent with `timeout_seconds` was answered, or given up on. The last one clears
    // the sum exactly (no rounding left over from the subtractions).
    void settle(double timeout_seconds) {
        --count_;
        seconds_ = count_ > 0 ? std::max(0.0, seconds_ - timeout_seconds) : 0.0;
    }
    // Every call is lost at once (the worker died).
    void clear() { *this = {}; }

    [[nodiscard]] int count() const { return count_; }
    [[nodiscard]] double seconds() const { return seconds_; }

private:
    int count_ = 0;
    double seconds_ = 0;
};

}  // namespace weft::swarm
