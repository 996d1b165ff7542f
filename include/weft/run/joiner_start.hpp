// Taking in the processes of an elastic run's grow, or of a job launched with --join, while
// the old ranks train on (issue 48's join). What takes long is the joiners' own start: the
// program, MPI_Init, the connection and the merge (over a second on one machine, far more
// across nodes). Those run here on a thread of this rank's own, over a duplicate of the world,
// so that the steps on the world go on meanwhile, and so do the splits that make the grown
// layout's communicators; the switch waits only for what is left once every rank's thread is
// done: the handshake, the move and the new engine around the moved state
// (run/elastic_session.hpp).
//
// The sequence, on every old rank (the thread) and every joiner (run::trainer's join):
//   old ranks                                  joiners
//   MPI_Comm_spawn over the duplicate    <->   MPI_Init, MPI_Comm_get_parent
//   (or MPI_Comm_accept on the port      <->   MPI_Init, MPI_Comm_connect: run/join_connect.hpp)
//   MPI_Intercomm_merge (old ranks first) <->  MPI_Intercomm_merge (run::joined_world)
//                                              the run's input checks
//   join_vote: rank 0's terms            ->    compared with their own (run/join_terms.hpp)
//              every rank agrees?        <->   a "no" ends the start on every rank: the
//                                              joiners exit 2, the run goes on without them
//   the layout to go on in (the planner)  ->   the layout (or that none could be chosen)
//   its communicators, split from the     <->  the same splits, and their state buffers
//   merged world (the session's prepare)       (weft::engine::prepare_layout)
//   --- the thread is done; at the first boundary where every old rank's is, on the main thread:
//   broadcast the join_handshake         ->    the step and the layouts (or "the run ended")
//   move_to_world over the merged world  <->   move_to_world
//
// MPI calls from two threads at once need MPI_THREAD_MULTIPLE. Where the MPI gave less, the
// same calls run at once, at the boundary of the grow, and the run waits for them.
#pragma once

#include "weft/comm/mpi.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/run/join_handshake.hpp"
#include "weft/run/join_terms.hpp"

namespace weft::run {

// Whether this process may call MPI from a second thread while the first trains.
[[nodiscard]] inline bool mpi_allows_threads() {
    int provided = MPI_THREAD_SINGLE;
    return MPI_Query_thread(&provided) == MPI_SUCCESS && provided == MPI_THREAD_MULTIPLE;
}

// The end of a join's start, collective over the merged world, on the old ranks' start thread
// and on the joiners after their input checks: rank 0 sends its terms (`terms` becomes them on
// every rank); every rank says whether it agrees with them (`agrees`); true when every rank does.
template <class Agrees>
bool join_vote(MPI_Comm merged, join_terms& terms, Agrees&& agrees) {
    comm::detail::mpi_check(MPI_Bcast(&terms, static_cast<int>(sizeof terms), MPI_BYTE, 0, merged),
                            "MPI_Bcast (join terms)");
    int all = agrees(static_cast<const join_terms&>(terms)) ? 1 : 0;
    comm::detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, merged),
                            "MPI_Allreduce (join vote)");
    return all == 1;
}

// Test hook (tests/elastic/elastic_run.sh's grow-late): WEFT_ELASTIC_JOINER_WAIT_FOR=PATH holds
// a started process before its vote until PATH exists, so that a test can end the run before
// its joiners are ready however fast the machine trains. The old ranks train on meanwhile.
inline void hold_joiner_if_told() {
    const char* path = std::getenv("WEFT_ELASTIC_JOINER_WAIT_FOR");
    if (path == nullptr || *path == '\0') return;
    std::error_code ignored;
    while (!std::filesystem::exists(path, ignored)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Where a join's processes come from.
struct joiner_source {
    int count = 0;        // processes
    bool accept = false;  // false: MPI_Comm_spawn them; true: accept a job launched with --join
    std::string port;     // accept: the port (significant on rank 0 only)

    [[nodiscard]] std::string describe() const {
        return (accept ? "accept " : "grow ") + std::to_string(count);
    }
};

// The joiners' side of the end of a start, after their vote: the running layout and the one the
// old ranks chose to go on in (`next`), broadcast over the merged world (`world`, the joiners'
// own view of it). Throws where the old ranks could choose none (their output says why).
[[nodiscard]] inline join_handshake receive_start_layouts(comm::mpi& world) {
    join_handshake layouts;
    world.broadcast(std::as_writable_bytes(std::span<join_handshake>(&layouts, 1)), 0);
    if (layouts.next.world == 0)
        throw error("the running job chose no layout for these processes (its output says why)");
    return layouts;
}

// The end of a start, collective over the merged world, on the old ranks' start thread and on
// the joiners once they have prepared the chosen layout: an old rank's start is done only when
// the joiners' buffers are made too (where the communicators are not made ahead, nothing else
// waits for them). Plain MPI, as the vote: weft's communicators are for the main thread.
inline void end_of_start(MPI_Comm merged) {
    comm::detail::mpi_check(MPI_Barrier(merged), "MPI_Barrier (end of the join's start)");
}

class joiner_start {
public:
    // Collective over the merged world, on the old ranks' start thread and on the joiners:
    // makes what the move onto it needs, the grown layout's communicators and the move's plan
    // (weft::engine::prepare_layout; the joiners make their state buffers there too).
    using preparer = std::function<void(comm::mpi& merged, const parallel_config& chosen)>;

    // Collective over `world` (it is duplicated): starts the processes of `source` (or accepts
    // them), agrees with them on `terms` (the run's: run/join_terms.hpp), then calls `choose`
    // (the layout over the grown world; it must only read what the training does not change),
    // tells the joiners that layout and `running`'s (the running layout and its partition) and
    // calls `prepare` with it, collectively with theirs. `in_background`: on a thread of its
    // own (needs mpi_allows_threads()); otherwise now.
    joiner_start(comm::mpi& world, joiner_source source, const join_terms& terms, const join_handshake& running,
                 std::function<parallel_config()> choose, preparer prepare, bool in_background)
        : count_(source.count),
          source_(std::move(source)),
          terms_(terms),
          announced_(running),
          started_(std::chrono::steady_clock::now()),
          timeout_(world.timeout()),
          choose_(std::move(choose)),
          prepare_(std::move(prepare)) {
        if (!source_.accept) {
            const std::vector<std::string>& arguments = detail::launch_arguments();
            require(!arguments.empty(), "grow", count_, "needs the program's command line (run::launch records it)");
            arguments_.assign(arguments.begin() + 1, arguments.end());
            // The program itself, wherever the launcher found it.
            program_ = std::filesystem::read_symlink("/proc/self/exe").string();
        }
        comm::detail::mpi_check(MPI_Comm_dup(world.native(), &parents_), "MPI_Comm_dup");
        if (in_background)
            thread_ = std::thread([this] { start(); });
        else
            start();
    }
    joiner_start(const joiner_start&) = delete;
    joiner_start& operator=(const joiner_start&) = delete;
    // A start the run never took (it ended first, on every rank): the joiners hear that the run
    // ended, and exit 0. One that failed is only freed (joiners that voted "no" have left).
    // An accept nobody connects to never ends: the session gives such a start up instead of
    // destroying it (run/elastic_session.hpp).
    ~joiner_start() {
        if (thread_.joinable()) thread_.join();
        if (merged_ == MPI_COMM_NULL || failure_) {
            if (merged_ != MPI_COMM_NULL) MPI_Comm_free(&merged_);
            free_parents();
            return;
        }
        try {
            comm::mpi grown(std::exchange(merged_, MPI_COMM_NULL), true);
            if (grown.rank() == 0)
                std::printf("elastic | the run ended before the %d processes of `%s` were taken in: they leave\n",
                            count_, source_.describe().c_str());
            join_handshake ended;
            ended.step = join_handshake::run_ended;
            grown.broadcast(std::as_writable_bytes(std::span<join_handshake>(&ended, 1)), 0);
        } catch (...) {  // nothing more to tell them: the job's end ends them
        }
        free_parents();
    }

    // Whether this rank's part is done (the joiners are connected and ready, or it failed).
    [[nodiscard]] bool done() const { return done_.load(); }
    [[nodiscard]] int count() const { return count_; }
    [[nodiscard]] const joiner_source& source() const { return source_; }
    // Waits up to `patience` for done().
    [[nodiscard]] bool wait_done(std::chrono::duration<double> patience) const {
        const auto deadline = std::chrono::steady_clock::now() + patience;
        while (!done() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return done();
    }
    // From the start to this rank's part being done.
    [[nodiscard]] double seconds_to_ready() const { return seconds_to_ready_; }
    // Of that, the `prepare` call: the grown layout's communicators (and whatever else every
    // rank makes there with the joiners: their state buffers, which the splits wait for).
    [[nodiscard]] double seconds_preparing() const { return seconds_preparing_; }
    // Once done() without a failure: what `choose` gave.
    [[nodiscard]] const parallel_config& chosen() const { return *chosen_; }

    // Once done() (or it waits): the merged world, the old ranks first; rethrows a failure.
    [[nodiscard]] comm::mpi take() {
        if (thread_.joinable()) thread_.join();
        if (failure_) std::rethrow_exception(failure_);
        comm::mpi grown(std::exchange(merged_, MPI_COMM_NULL), true);
        grown.set_timeout(timeout_);
        free_parents();
        return grown;
    }

private:
    [[nodiscard]] MPI_Comm spawn() {
        std::vector<char*> argv;
        for (std::string& argument : arguments_) argv.push_back(argument.data());
        argv.push_back(nullptr);
        MPI_Comm inter = MPI_COMM_NULL;
        std::vector<int> codes(static_cast<std::size_t>(count_), MPI_SUCCESS);
        comm::detail::mpi_check(
            MPI_Comm_spawn(program_.c_str(), argv.data(), count_, MPI_INFO_NULL, 0, parents_, &inter, codes.data()),
            "MPI_Comm_spawn");
        return inter;
    }
    [[nodiscard]] MPI_Comm accept() {
        MPI_Comm inter = MPI_COMM_NULL;
        comm::detail::mpi_check(MPI_Comm_accept(source_.port.c_str(), MPI_INFO_NULL, 0, parents_, &inter),
                                "MPI_Comm_accept");
        return inter;
    }

    void start() {
        try {
            MPI_Comm inter = source_.accept ? accept() : spawn();
            int arrived = 0;
            MPI_Comm_remote_size(inter, &arrived);
            MPI_Comm merged = MPI_COMM_NULL;
            comm::detail::mpi_check(MPI_Intercomm_merge(inter, 0, &merged), "MPI_Intercomm_merge");
            // Only the merged world is used; a connection left open makes Open MPI 5's
            // MPI_Finalize crash.
            MPI_Comm_disconnect(&inter);
            MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
            merged_ = merged;  // the destructor's to free, whatever follows
            // A job launched with --join announced its size: one of another size is refused.
            if (!join_vote(merged, terms_, [&](const join_terms&) { return arrived == count_; }))
                throw error(arrived != count_ ? std::to_string(arrived) + " processes connected where `" +
                                                    source_.describe() + "` announced " + std::to_string(count_)
                                              : "the joining processes' options differ from the run's (their "
                                                "message names the option); they leave");
            choose_and_prepare(merged);
        } catch (...) {
            failure_ = std::current_exception();
        }
        seconds_to_ready_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
        done_.store(true);
    }
    // The joiners wait for the layouts (receive_start_layouts): they hear of a failure to
    // choose one too, and end, instead of waiting in the splits.
    void choose_and_prepare(MPI_Comm merged) {
        std::exception_ptr no_choice;
        try {
            chosen_.emplace(choose_());
        } catch (...) {
            no_choice = std::current_exception();
        }
        comm::mpi over(merged);  // a view: merged_ stays the destructor's or take()'s to free
        over.set_timeout(timeout_);  // the communicators split from it keep it
        join_handshake told = announced_;
        told.next.world = 0;
        if (!no_choice) told.next = layout_fields::of(*chosen_);
        over.broadcast(std::as_writable_bytes(std::span<join_handshake>(&told, 1)), 0);
        if (no_choice) std::rethrow_exception(no_choice);
        const auto preparing = std::chrono::steady_clock::now();
        prepare_(over, *chosen_);
        end_of_start(merged);
        seconds_preparing_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - preparing).count();
    }
    void free_parents() {
        if (parents_ != MPI_COMM_NULL) MPI_Comm_free(&parents_);
    }

    int count_;
    joiner_source source_;
    join_terms terms_;
    join_handshake announced_;  // the running layout, told to the joiners with the chosen one
    std::chrono::steady_clock::time_point started_;
    comm::timeout_duration timeout_;
    std::vector<std::string> arguments_;
    std::string program_;
    MPI_Comm parents_ = MPI_COMM_NULL;  // the world's duplicate the spawn is collective over
    MPI_Comm merged_ = MPI_COMM_NULL;   // set by start(), then read once done_ is seen
    std::function<parallel_config()> choose_;
    preparer prepare_;
    std::optional<parallel_config> chosen_;
    std::exception_ptr failure_;
    double seconds_to_ready_ = 0;
    double seconds_preparing_ = 0;
    std::atomic<bool> done_{false};
    std::thread thread_;  // last: started once everything it reads is set
};

}  // namespace weft::run
