// The communication watchdog's vocabulary: how long a rank may wait on a peer (per
// communicator, 300 s by default), and the error (or, for comm::mpi, the report) when a
// receive or a collective waits longer, as NCCL's and PyTorch's watchdogs end a job
// instead of letting it hang.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::comm {

using timeout_clock = std::chrono::steady_clock;
using timeout_duration = timeout_clock::duration;

// Long enough for a slow checkpoint on a peer or a first step that allocates everything,
// short enough that a stopped job frees its machines the same coffee break (NCCL and
// PyTorch default to 10 and 30 minutes; a CPU run is smaller).
inline constexpr std::chrono::seconds default_timeout{300};

// "Wait forever": what set_timeout makes of any duration of 100 years or more, e.g.
// std::chrono::seconds::max() or std::chrono::duration<double>(INFINITY).
inline constexpr timeout_duration no_timeout = timeout_duration::max();

// The timeout as a communicator stores it: > 0, at least one clock tick, saturated to
// no_timeout from 100 years on (so that now + timeout never overflows).
template <class Rep, class Period>
[[nodiscard]] timeout_duration checked_timeout(std::chrono::duration<Rep, Period> timeout,
                                               std::string_view parameter = "timeout") {
    const double seconds = std::chrono::duration<double>(timeout).count();
    if (!(seconds > 0)) {
        char text[48];
        std::snprintf(text, sizeof text, "%g s", seconds);
        throw invalid_argument(parameter, std::string(text),
                               "must be > 0 (a duration; std::chrono::seconds::max() or "
                               "weft::comm::no_timeout waits forever)");
    }
    constexpr double forever = 100.0 * 365 * 24 * 3600;
    if (seconds >= forever) return no_timeout;
    const auto ticks = std::chrono::duration_cast<timeout_duration>(std::chrono::duration<double>(seconds));
    return ticks.count() > 0 ? ticks : timeout_duration(1);
}

// When a wait that started now, with this timeout, gives up.
[[nodiscard]] inline timeout_clock::time_point deadline_after(timeout_duration timeout) {
    return timeout == no_timeout ? timeout_clock::time_point::max() : timeout_clock::now() + timeout;
}

[[nodiscard]] inline double timeout_seconds(timeout_duration timeout) {
    return std::chrono::duration<double>(timeout).count();
}

// A receive, send or collective waited longer than its communicator's timeout. The message
// names this rank, what it waited for, the peer(s) it waited on, how long, and what to do;
// the program loop adds the schedule action the rank was executing (with_action). After
// it, the communicator is not fit for further collectives (a peer may be half-way through
// one): end the run. Thrown by comm::local and comm::nccl; comm::mpi's waits cannot give up,
// and its watchdog (weft/comm/watchdog.hpp) prints this message and ends the process.
class timeout_error : public error {
public:
    struct details {
        int rank = 0;                  // this rank, in the world (MPI_COMM_WORLD or local::run)
        std::string operation;         // e.g. "irecv(source=2, tag=17)" or "barrier() over 4 ranks"
        std::vector<int> peers;        // world ranks it waited on; empty where it cannot tell
        double waited_seconds = 0;
        double timeout_seconds = 0;
        std::string action;            // the schedule action, e.g. "F of micro-batch 3, stage 1"
    };

    explicit timeout_error(details d) : error(compose(d)), details_(std::move(d)) {}

    [[nodiscard]] const details& info() const { return details_; }

    // The same timeout, described as happening during `action` (what the rank was doing).
    [[nodiscard]] timeout_error with_action(std::string action) const {
        details d = details_;
        d.action = std::move(action);
        return timeout_error(std::move(d));
    }

private:
    static std::string compose(const details& d) {
        char waited[64];
        std::snprintf(waited, sizeof waited, "%.1f s (timeout %g s)", d.waited_seconds, d.timeout_seconds);
        std::string message = "communication timeout: rank " + std::to_string(d.rank) + " waited " + waited +
                              " in " + d.operation;
        if (!d.peers.empty()) {
            message += d.peers.size() == 1 ? " for rank " : " for ranks ";
            for (std::size_t i = 0; i < d.peers.size(); ++i) {
                if (i != 0) message += ", ";
                message += std::to_string(d.peers[i]);
            }
        }
        if (!d.action.empty()) message += ", during " + d.action;
        message += "; the peer is stopped, crashed, stuck or far slower: check that it is alive and not stopped "
                   "(kill -STOP), or raise the timeout (train_gpt --comm-timeout SECONDS, "
                   "communicator.set_timeout())";
        return message;
    }

    details details_;
};

}  // namespace weft::comm
