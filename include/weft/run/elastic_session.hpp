// Elastic training on MPI (`--elastic`): what run::trainer does at each step boundary and
// after a failure, so that ranks may leave, crash or join while the run trains on.
//
// - Leave with notice (the leave signal, SIGUSR1 by default, or `leave RANKS` in the control
//   file): every rank agrees on who leaves at the boundary; the ranks reorder so that those
//   who stay come first, the state moves to the layout the chooser gives for them (the leavers
//   send theirs and hold nothing), and the leavers end with run::left_the_run (exit 0). Any MPI.
// - Crash (ULFM only): a step, or anything at a boundary, throws comm::peer_lost on every
//   survivor (mpi_fault.hpp revokes every communicator). The survivors shrink the world, roll
//   their own state back to their snapshot of the last boundary, take the failed ranks' state
//   from their buddies' copies (elastic/state_snapshot.hpp), move it all to the chosen layout
//   over the survivors and train again from that boundary: the interrupted step is redone once
//   and counted once, and the data position comes back with the state. State with no copy
//   left (a rank failed with its buddy) is left zero by the move and the newest checkpoint is
//   loaded into the new layout, online.
// - Join (`grow N` in the control file): the ranks start N processes of the program
//   (MPI_Comm_spawn), merge them in after themselves (run/joiner_start.hpp: on a thread of its
//   own, while the run trains on, where the MPI allows threads), and at the first boundary where
//   every rank's joiners are ready tell them the step and the layouts (run/join_handshake.hpp)
//   and move the state onto the grown world. Any MPI. A job launched separately with
//   `--join CONTROL` joins the same way through MPI_Comm_accept on the port rank 0 publishes
//   (run/join_connect.hpp), announced by the `accept N` it appends to the control file.
// - Stall (ULFM and MPI_THREAD_MULTIPLE): a wait past --comm-timeout makes the watchdog revoke
//   every communicator (comm/mpi_fault.hpp) instead of ending the process, and the ranks
//   recover as from a crash; a stalled rank that is alive again takes part, and nothing is
//   lost (the same layout, back to the last mirrored boundary).
// - The mirror is refreshed every --mirror-every steps at the boundary, before any event is
//   handled (a failure during an event's switch rolls back to that boundary), and again after
//   an event (the layout changed).
//
// Every event is one elastic_event (run/elastic_event.hpp) that the trainer prints and logs.
#pragma once

#include "weft/comm/mpi.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <deque>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/comm/peer_lost.hpp"
#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/elastic/state_snapshot.hpp"
#include "weft/elastic/switch_report.hpp"
#include "weft/elastic/transition_plan.hpp"
#include "weft/run/elastic_control.hpp"
#include "weft/run/elastic_event.hpp"
#include "weft/run/join_connect.hpp"
#include "weft/run/join_handshake.hpp"
#include "weft/run/join_terms.hpp"
#include "weft/run/joiner_start.hpp"
#include "weft/run/leave_signal.hpp"
#include "weft/run/settings.hpp"
#include "weft/train/checkpoint_directory.hpp"
#include "weft/train/engine_options.hpp"

namespace weft::run {

// Thrown on a rank that has handed its state over and leaves the run: the launch ends the
// process with exit code 0 (at once under ULFM; without it MPI_Finalize waits for the others).
class left_the_run : public std::exception {
public:
    [[nodiscard]] const char* what() const noexcept override { return "this rank left the run"; }
};

// A joiner's first step, collective with the old ranks' grow: the handshake from rank 0.
[[nodiscard]] inline join_handshake receive_join_handshake(comm::mpi& world) {
    join_handshake told;
    world.broadcast(std::as_writable_bytes(std::span<join_handshake>(&told, 1)), 0);
    return told;
}

// What a boundary decided.
struct boundary_outcome {
    std::vector<elastic_event> events;  // the joins and leaves handled, in order
    bool everyone_leaves = false;       // every rank was told to leave: stop as for SIGTERM
};

template <class Engine>
class elastic_session {
public:
    using scalar = typename Engine::scalar;
    // The layout to go on in over `ranks` ranks, given the current one (the planner's choice:
    // run/elastic_layout.hpp); its world size may be below `ranks` (spares).
    using layout_chooser = std::function<parallel_config(int ranks, const parallel_config& current)>;

    elastic_session(const settings& s, comm::mpi& world, layout_chooser choose, const join_terms& terms)
        : settings_(s),
          world_(&world),
          choose_(std::move(choose)),
          launch_rank_(world.rank()),
          launch_size_(joined_running_world() ? 0 : world.size()),
          terms_(terms) {
        comm::set_peer_loss_recovery(comm::has_ulfm());
        comm::hand_stalls_to_recovery(comm::can_recover_from_stalls());
        if (const int signal = leave_signal_number(s.leave_signal); signal != 0) leave_signal_.emplace(signal);
        if (world.rank() == 0 && !s.control_file.empty()) {
            control_.emplace(s.control_file);
            port_.emplace(s.control_file);
        }
    }
    elastic_session(const elastic_session&) = delete;
    elastic_session& operator=(const elastic_session&) = delete;
    ~elastic_session() {
        comm::hand_stalls_to_recovery(false);
        // An accept announced but never connected to waits in MPI_Comm_accept for good: the
        // run ends without those processes, leaving the start's thread where it is (and
        // MPI_Finalize, which might wait for it, bounded).
        if (joining_ && joining_->source().accept && !joining_->wait_done(std::chrono::seconds(5))) {
            if (world_->rank() == 0)
                std::fprintf(stderr, "elastic | the %d processes announced by `%s` never connected: the run ends "
                             "without them\n", joining_->count(), joining_->source().describe().c_str());
            static_cast<void>(joining_.release());
            detail::finalize_may_wait.store(true);
        }
    }

    [[nodiscard]] comm::mpi& world() { return *world_; }

    // At the boundary before step `step`, collective over the world: the mirror when it is
    // due, then the leaves or the grow asked for since the last boundary.
    boundary_outcome at_boundary(Engine& engine, long long step) {
        boundary_outcome out;
        // The mirror first, so that a failure during an event's switch rolls back to this very
        // boundary (no step is trained twice); and again after an event, whose layout is new.
        // A process a grow started arrives in the middle of its parents' boundary: they have
        // mirrored, agreed on the requests and moved the state (run::trainer's join); the
        // mirror after the event is next.
        // While joiners start there is none: a crash then ends the run anyway (recover()), and
        // the mirror's agreement would run beside the start thread's communicator creation,
        // which Open MPI 5's fault tolerance runs through the same agreements. The first
        // boundary after the start mirrors.
        const bool due = mirror_due_ || step % settings_.mirror_every == 0;
        if (!just_joined_ && comm::has_ulfm() && due && joining_) mirror_due_ = true;
        if (!just_joined_ && comm::has_ulfm() && due && !joining_) refresh_mirror(engine, step);
        const auto start = std::chrono::steady_clock::now();
        const requests asked = just_joined_ ? requests{} : agreed_requests();
        just_joined_ = false;
        const std::vector<int>& leavers = asked.leavers;
        if (!leavers.empty() && everyone_leaves(leavers, world_->size())) {
            out.everyone_leaves = true;  // joiners still starting hear that the run ended
            return out;
        }
        grows_asked_ += asked.grow;
        if (asked.accept > 0) accepts_asked_.push_back(asked.accept);
        // Joiners being started join at the first boundary where every rank's are ready, or at
        // once (waiting for them) where ranks are to leave: the leave comes after, in the
        // grown world, whose first ranks are these. A job that is to connect may never come, so
        // a leave waits for it at the boundaries instead (postponed_leavers_).
        std::vector<int> leaving = leavers;
        const bool ready = joining_ && all_joiners_ready();
        if (joining_ && !ready && joining_->source().accept && !leaving.empty()) {
            postponed_leavers_ = std::exchange(leaving, {});
        } else if (joining_ && (ready || !leaving.empty())) {
            if (auto joined = finish_grow(engine, step, start)) out.events.push_back(std::move(*joined));
            mirror_due_ = true;
        }
        if (!leaving.empty()) {
            postponed_leavers_.clear();
            out.events.push_back(leave(engine, step, leaving, start));
            mirror_due_ = true;
        }
        // One start at a time; a job connecting (accept) goes first, as it waits for the run.
        if (!joining_ && (!accepts_asked_.empty() || grows_asked_ > 0)) {
            if (!accepts_asked_.empty()) {
                start_joining(engine, step, {.count = accepts_asked_.front(), .accept = true,
                                             .port = port_ ? port_->name() : std::string()});
                accepts_asked_.pop_front();
            } else {
                start_joining(engine, step, {.count = std::exchange(grows_asked_, 0), .accept = false, .port = {}});
            }
            if (all_joiners_ready()) {  // started at once (no threads), or already there
                if (auto joined = finish_grow(engine, step, start)) out.events.push_back(std::move(*joined));
                mirror_due_ = true;
            }
        }
        if (comm::has_ulfm() && mirror_due_ && !joining_) refresh_mirror(engine, step);
        return out;
    }

    // After a comm::peer_lost on this rank (every survivor gets one): the survivors rebuild the
    // world, restore the state of the last mirrored boundary on the chosen layout, and the run
    // goes on from that step, which is returned. A failure during it ends the run (exit 2).
    // `voted`: the peer_lost was a comm::peer_lost_in_agreement.
    long long recover(Engine& engine, elastic_event& event, bool voted) {
        const auto detected = std::chrono::steady_clock::now();
        if (!comm::has_ulfm())
            throw error("a rank failed and this build has no MPI fault tolerance (ULFM): the run ends here; "
                        "continue from the newest checkpoint with --resume (docs/elastic.md)");
        if (mirror_.own().empty() || !mirror_layout_)
            throw error("a rank failed before the first mirror of the state was taken: nothing to recover from; "
                        "continue from the newest checkpoint with --resume");
        if (joining_) {
            // Its thread may wait in a collective with the failed rank for good: the process
            // ends with it (launch's exit 2), never joining it.
            const std::string asked = joining_->source().describe();
            static_cast<void>(joining_.release());
            throw error("a rank failed while the processes of `" + asked + "` asked before step " +
                        std::to_string(grow_asked_at_) +
                        " were starting: the run ends here; the newest checkpoint is intact: continue with --resume");
        }
        // A stall during the recovery ends the run (exit 2) rather than start another one.
        comm::hand_stalls_to_recovery(false);
        try {
            const long long resume_at = recover_from_mirror(engine, event, detected, voted);
            comm::hand_stalls_to_recovery(comm::can_recover_from_stalls());
            adopt_control_file();
            return resume_at;
        } catch (const comm::peer_lost& again) {
            throw error(std::string("another rank failed during the recovery (") + again.what() +
                        "): the run ends here; the newest checkpoint is intact: continue with --resume");
        }
    }

    // Fault injection for tests and benchmarks: WEFT_ELASTIC_KILL="RANK@STEP[,RANK@STEP...]"
    // makes the process that is world rank RANK of the launch SIGKILL itself at the boundary
    // before step STEP (once the mirror is taken and the steps before it reported), so the
    // others fail inside that step. Several ranks at one step die together: every rank meets in
    // a barrier first, so that none of them is still inside the mirror's agreement when the
    // first dies (it would recover with the others and die only at the redone boundary). The
    // trainer calls it after at_boundary, on every rank.
    void crash_if_told(long long step) {
        const char* plan = std::getenv("WEFT_ELASTIC_KILL");
        if (plan == nullptr) return;
        int victims = 0;
        bool this_rank = false;
        std::string_view rest(plan);
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            const std::string_view item = rest.substr(0, comma);
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
            const auto at = item.find('@');
            if (at == std::string_view::npos) continue;  // not RANK@STEP: ignored, as is any other malformed item
            int rank = -1;
            long long when = -1;
            const std::string_view rank_text = item.substr(0, at), step_text = item.substr(at + 1);
            std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
            std::from_chars(step_text.data(), step_text.data() + step_text.size(), when);
            if (when != step) continue;
            ++victims;
            this_rank = this_rank || rank == launch_rank_;
        }
        if (victims > 1) MPI_Barrier(world_->native());
        if (this_rank) {
            std::fflush(stdout);
            std::raise(SIGKILL);
        }
    }

private:
    // WEFT_ELASTIC_KILL_IN_RECOVERY=RANK, WEFT_ELASTIC_KILL_IN_MOVE=RANK: that launch rank
    // SIGKILLs itself once a recovery has shrunk the world, or as a leave's move begins.
    void crash_if_told_in(const char* variable) const {
        if (const char* victim = std::getenv(variable); victim != nullptr && std::atoi(victim) == launch_rank_) {
            std::fflush(stdout);
            std::raise(SIGKILL);
        }
    }

    // What an event's switch did, from its report.
    static void take_figures(elastic_event& event, const elastic::switch_report& report) {
        event.to = report.to;
        event.bytes_moved = report.bytes_moved;
        event.bytes_made_ahead = report.bytes_made_ahead;
        event.phases.check = report.check_seconds;
        event.phases.plan = report.plan_seconds;
        event.phases.move = report.move_seconds;
        event.phases.build = report.build_seconds;
    }

    static double since(std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    }

    struct requests {
        std::vector<int> leavers;
        int grow = 0;    // processes to start
        int accept = 0;  // processes of a job launched with --join to accept (one job per boundary)
    };
    // The ranks told to leave by signal or by the control file, and the processes to start or
    // accept (rank 0 reads the file), agreed. A line that does not fit the world now is skipped
    // with a message; the run goes on.
    requests agreed_requests() {
        const auto n = static_cast<std::size_t>(world_->size());
        // Per rank: leaves; then the processes to start, and those of a job to accept.
        std::vector<double> told(n + 2, 0.0);
        // The leave signal, and a leave a failure interrupted (the leaver is still here, rolled
        // back): asked again. The flag is reset only once its leave is agreed.
        int signalled = detail::received_leave_signal.load();
        for (const int r : agreed_leavers(*world_, signalled != 0 || still_leaving_))
            told[static_cast<std::size_t>(r)] = 1;
        if (signalled != 0) detail::received_leave_signal.compare_exchange_strong(signalled, 0);
        for (const int r : postponed_leavers_) told[static_cast<std::size_t>(r)] = 1;
        if (world_->rank() == 0 && control_) {
            for (const control_command& c : control_->poll()) {
                try {
                    check_control_command(c, world_->size() + joiners_asked() + static_cast<int>(told[n]), world_max());
                    require(c.kind != control_kind::accept || (port_ && !port_->name().empty()), "accept", c.count,
                            "needs the port this run publishes for --join, and this MPI opened none");
                    if (c.kind == control_kind::grow)
                        told[n] += c.count;
                    else if (c.kind == control_kind::accept)
                        rank0_accepts_.push_back(c.count);
                    else
                        for (const int r : c.ranks) told[static_cast<std::size_t>(r)] = 1;
                } catch (const error& e) {
                    std::fprintf(stderr, "elastic | %s: %s; line ignored\n", control_->path().c_str(),
                                 unprefixed(e).c_str());
                }
            }
            // One job to accept per boundary, each with an accept of its own.
            if (!rank0_accepts_.empty()) {
                told[n + 1] = rank0_accepts_.front();
                rank0_accepts_.pop_front();
            }
        }
        world_->broadcast(std::as_writable_bytes(std::span<double>(told)), 0);
        requests out;
        for (std::size_t r = 0; r < n; ++r)
            if (told[r] > 0) out.leavers.push_back(static_cast<int>(r));
        out.grow = static_cast<int>(told[n]);
        out.accept = static_cast<int>(told[n + 1]);
        return out;
    }
    // The processes asked for and not in the world yet: being started, to start, to accept.
    [[nodiscard]] int joiners_asked() const {
        int count = (joining_ ? joining_->count() : 0) + grows_asked_;
        for (const int accept : accepts_asked_) count += accept;
        for (const int accept : rank0_accepts_) count += accept;
        return count;
    }
    [[nodiscard]] int world_max() const { return settings_.world_max > 0 ? settings_.world_max : launch_size_; }

    elastic_event leave(Engine& engine, long long step, const std::vector<int>& leavers,
                        std::chrono::steady_clock::time_point start) {
        const int n = world_->size();
        const int stay = n - static_cast<int>(leavers.size());
        const bool leaving = std::binary_search(leavers.begin(), leavers.end(), world_->rank());
        if (leavers.front() == 0) hand_over_control(leavers);
        // Who stays first, in rank order, then the leavers: the new layout's rank j is rank j.
        const std::vector<elastic::state_source> sources = elastic::stayers_first(n, leavers);
        elastic_event event;
        event.kind = elastic_event_kind::leave;
        event.step = step;
        event.ranks = leavers;
        event.from = engine.layout().describe();
        event.world_from = n;
        event.world_to = stay;
        event.phases.agree = since(start);
        const auto rebuild = std::chrono::steady_clock::now();
        comm::mpi& moved_over = keep(world_->split(0, sources[static_cast<std::size_t>(world_->rank())].rank));
        comm::mpi& stays_on = keep(moved_over.split(leaving ? 1 : 0, moved_over.rank()));
        event.phases.rebuild_communicators = since(rebuild);
        const parallel_config config = choose_(stay, engine.config());
        still_leaving_ = leaving;
        crash_if_told_in("WEFT_ELASTIC_KILL_IN_MOVE");
        const auto report = engine.move_to_world(moved_over, config, {.partition = {}, .staging_bytes = staging_bytes()},
                                                 sources, std::nullopt, nullptr, &stays_on);
        take_figures(event, report);
        event.seconds_to_training = since(start);
        if (leaving) throw left_the_run();
        world_ = &stays_on;
        mirror_.clear();
        return event;
    }

    // Collective over the world, before rank 0 leaves: the control file's watcher, the port and
    // the `accept` lines read and not agreed on yet move to the first rank that stays (rank 0
    // of the world after the leave), which goes on reading the file where rank 0 stopped and
    // publishes a port of its own. Without it the run would silently stop reading the file.
    void hand_over_control(const std::vector<int>& leavers) {
        if (settings_.control_file.empty()) return;
        int heir = 0;
        while (std::binary_search(leavers.begin(), leavers.end(), heir)) ++heir;
        // Where rank 0 stopped reading (-1: it holds no watcher, e.g. the heir of a leave that a
        // crash rolled back already took it), and how many accepts it holds; then those accepts.
        double read[3] = {-1, 0, 0};
        if (world_->rank() == 0 && control_) {
            const control_file::position at = control_->read_position();
            read[0] = static_cast<double>(at.offset);
            read[1] = static_cast<double>(at.lines);
            read[2] = static_cast<double>(rank0_accepts_.size());
            control_.reset();
            port_.reset();  // its file goes before the heir writes its own
        }
        world_->broadcast(std::as_writable_bytes(std::span<double>(read)), 0);
        std::vector<double> accepts(static_cast<std::size_t>(read[2]), 0.0);
        if (world_->rank() == 0) std::copy(rank0_accepts_.begin(), rank0_accepts_.end(), accepts.begin());
        if (!accepts.empty()) world_->broadcast(std::as_writable_bytes(std::span<double>(accepts)), 0);
        if (world_->rank() != heir || read[0] < 0) return;
        control_.emplace(settings_.control_file,
                         control_file::position{static_cast<std::uintmax_t>(read[0]), static_cast<long long>(read[1])});
        port_.emplace(settings_.control_file);
        for (const double count : accepts) rank0_accepts_.push_back(static_cast<int>(count));
    }

    // After a recovery: where rank 0 failed, the new rank 0 reads the control file from now on
    // and publishes a port of its own. The failed reader's position died with it, so the lines
    // in the file now are history to the new watcher: a line appended after the last boundary
    // the failed rank read is not applied, and the message says so.
    void adopt_control_file() {
        if (world_->rank() != 0 || control_ || settings_.control_file.empty()) return;
        control_.emplace(settings_.control_file);
        port_.emplace(settings_.control_file);
        std::fprintf(stderr, "elastic | the rank that read --control %s failed: this rank (0 of %d) reads it from now on; "
                     "a line appended since the last step boundary before the failure is not applied: append it "
                     "again\n", settings_.control_file.c_str(), world_->size());
    }

    // Starts the processes of `source` (run/joiner_start.hpp: spawned, or a job launched with
    // --join accepted), on a thread where the MPI allows it; the run trains on until every
    // rank's are ready. The layout over the grown world is chosen there too: the engine's model
    // and options, which the chooser reads, do not change while it trains.
    // The grown layout's communicators and the move's plan are made there as well
    // (Engine::prepare_layout, into prepared_, which only the start writes until finish_grow
    // takes it).
    void start_joining(Engine& engine, long long step, joiner_source source) {
        const int grown = world_->size() + source.count;
        const parallel_config current = engine.config();
        prepared_.reset();
        joining_ = std::make_unique<joiner_start>(
            *world_, std::move(source), terms_, announced_layout(engine),
            [this, grown, current] { return choose_(grown, current); },
            [this, model = engine.model(), options = grown_options(engine.options()), running = engine.layout()](
                comm::mpi& merged, const parallel_config& chosen) {
                prepared_.emplace(Engine::prepare_layout(merged, chosen, model, options, {.moving_from = &running}));
            },
            mpi_allows_threads());
        grow_asked_at_ = step;
    }

    // The running layout, as a join's start announces it to the joiners.
    static join_handshake announced_layout(Engine& engine) {
        join_handshake running;
        running.running = layout_fields::of(engine.config());
        running.set_running_partition(engine.layout().partition());
        return running;
    }

    // A grow goes on in the default partition of the layout chosen (the partition of the
    // running layout was for its stage count).
    static train::engine_options grown_options(train::engine_options options) {
        options.partition = {};
        return options;
    }
    typename Engine::prepared_layout take_prepared() {
        require(prepared_.has_value(), "grown layout's communicators", "none",
                "must be made by the joiners' start before the move");
        typename Engine::prepared_layout out = std::move(*prepared_);
        prepared_.reset();
        return out;
    }

    // Collective: whether every rank's joiners are ready (or every rank's start is over, some
    // having failed).
    bool all_joiners_ready() {
        double done[1] = {joining_->done() ? 1.0 : 0.0};
        world_->allreduce_sum(std::span<double>(done));
        return static_cast<int>(done[0]) == world_->size();
    }

    // Once the joiners are ready (or waiting for them): merges them in after the ranks there
    // are, tells them the step and the layouts, and moves the state onto the grown world in the
    // layout the chooser gives for it. A start that failed on any rank is dropped with a message
    // (the run goes on in its world; joiners refused in the vote leave with exit 2, others that
    // started time out and end).
    std::optional<elastic_event> finish_grow(Engine& engine, long long step, std::chrono::steady_clock::time_point start) {
        const std::unique_ptr<joiner_start> joining = std::move(joining_);
        const int n = world_->size();
        const int count = joining->count();
        std::optional<comm::mpi> merged;
        std::string failure;
        try {
            merged.emplace(joining->take());
        } catch (const std::exception& e) {
            failure = unprefixed(e);
        }
        double failed[1] = {failure.empty() ? 0.0 : 1.0};
        world_->allreduce_sum(std::span<double>(failed));
        if (failed[0] > 0) {
            // One line where every rank failed alike (a refusal), else one from each that failed.
            const bool everyone = static_cast<int>(failed[0]) == n;
            if (world_->rank() == 0 || (!failure.empty() && !everyone))
                std::fprintf(stderr, "elastic | `%s` (asked before step %lld) failed on %d rank(s)%s%s; the run goes on "
                             "over its %d ranks\n", joining->source().describe().c_str(), grow_asked_at_,
                             static_cast<int>(failed[0]), failure.empty() ? "" : ": ", failure.c_str(), n);
            return std::nullopt;
        }
        elastic_event event;
        event.kind = elastic_event_kind::join;
        event.step = step;
        event.asked_step = grow_asked_at_;
        for (int r = n; r < n + count; ++r) event.ranks.push_back(r);
        event.from = engine.layout().describe();
        event.world_from = n;
        event.world_to = n + count;
        event.phases.start_joiners = joining->seconds_to_ready();
        event.phases.prepare_layout = joining->seconds_preparing();
        event.phases.agree = since(start);
        comm::mpi& grown = keep(std::move(*merged));
        const parallel_config& config = joining->chosen();  // for this layout: no event came between
        join_handshake told;
        told.step = step;
        told.running = layout_fields::of(engine.config());
        told.set_running_partition(engine.layout().partition());
        told.next = layout_fields::of(config);
        grown.broadcast(std::as_writable_bytes(std::span<join_handshake>(&told, 1)), 0);
        const auto report = engine.move_to_grown_world(grown, config, {.partition = {}, .staging_bytes = staging_bytes()},
                                                       take_prepared());
        take_figures(event, report);
        event.seconds_to_training = since(start);
        world_ = &grown;
        mirror_.clear();
        return event;
    }

    void refresh_mirror(Engine& engine, long long step) {
        const auto* state = engine.is_spare() ? nullptr : &engine.parts().state();
        const auto figures = mirror_.refresh(state, step, *world_);
        mirror_layout_.emplace(engine.layout());
        mirror_rank_ = world_->rank();
        mirror_world_ = world_->size();
        mirror_seconds_ += figures.seconds;
        ++mirrors_;
        mirror_bytes_ = figures.own_bytes + figures.held_bytes;
        mirror_due_ = false;
    }

    long long recover_from_mirror(Engine& engine, elastic_event& event, std::chrono::steady_clock::time_point detected,
                                  bool voted) {
        const int n = mirror_world_;
        const auto rebuild = std::chrono::steady_clock::now();
        // MPI pairs each rank's agreements over a communicator in order, and a revocation does
        // not interrupt one (only a dead member does). A stall can catch some ranks inside the
        // mirror's agreement and the others in their step: those vote no here, which answers
        // the agreement the first are in (it throws peer_lost_in_agreement there, and they
        // come here having voted), so that every rank meets the others in the shrink below
        // rather than in an agreement nobody else is in.
        if (!voted) static_cast<void>(world_->agree(false));
        comm::mpi& survivors = keep(world_->shrink());
        // The old ranks of the survivors, in the new order.
        std::vector<double> old_rank(static_cast<std::size_t>(survivors.size()));
        const double mine[1] = {static_cast<double>(mirror_rank_)};
        survivors.allgather(std::span<const double>(mine), std::span<double>(old_rank));
        event.phases.rebuild_communicators = since(rebuild);
        crash_if_told_in("WEFT_ELASTIC_KILL_IN_RECOVERY");
        std::vector<int> new_rank_of(static_cast<std::size_t>(n), -1);
        for (std::size_t j = 0; j < old_rank.size(); ++j) new_rank_of[static_cast<std::size_t>(old_rank[j])] = static_cast<int>(j);
        std::vector<int> failed;
        for (int r = 0; r < n; ++r)
            if (new_rank_of[static_cast<std::size_t>(r)] < 0) failed.push_back(r);
        // Every survivor's snapshot must be of one boundary, and each buddy says whether it
        // holds its failed predecessor's copy of it whole.
        const long long epoch = mirror_.epoch();
        const int predecessor = elastic::buddy_mirror<scalar>::mirrored_by(mirror_rank_, n);
        const bool holds_failed = std::binary_search(failed.begin(), failed.end(), predecessor) &&
                                  mirror_.held_complete() && mirror_.held_rank() == predecessor &&
                                  mirror_.held().epoch == epoch;
        std::vector<double> facts(2 * static_cast<std::size_t>(survivors.size()));
        const double my_facts[2] = {static_cast<double>(epoch), holds_failed ? 1.0 : 0.0};
        survivors.allgather(std::span<const double>(my_facts), std::span<double>(facts));
        for (std::size_t j = 0; j < old_rank.size(); ++j)
            if (static_cast<long long>(facts[2 * j]) != epoch)
                throw error("a rank failed while the state was being mirrored (survivors hold the boundaries before "
                            "steps " + std::to_string(epoch) + " and " + std::to_string(static_cast<long long>(facts[2 * j])) +
                            "): the run ends here; continue from the newest checkpoint with --resume");
        const int offset = mirror_layout_->num_stages();
        std::vector<elastic::state_source> sources(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
            const int j = new_rank_of[static_cast<std::size_t>(r)];
            if (j >= 0) {
                sources[static_cast<std::size_t>(r)] = {j, 0};
                continue;
            }
            const int buddy = new_rank_of[static_cast<std::size_t>(elastic::buddy_mirror<scalar>::buddy_of(r, n))];
            sources[static_cast<std::size_t>(r)] =
                buddy >= 0 && facts[2 * static_cast<std::size_t>(buddy) + 1] > 0 ? elastic::state_source{buddy, offset}
                                                                                  : elastic::state_source{-1, 0};
        }
        // This rank's state at the boundary, with its failed predecessor's beside it.
        const auto& optimizer = engine.options().optimizer;
        auto held = elastic::restore_snapshot(mirror_.own(), *mirror_layout_, mirror_rank_, optimizer);
        if (holds_failed) {
            auto theirs = elastic::restore_snapshot(mirror_.held(), *mirror_layout_, predecessor, optimizer, offset);
            for (auto& stage : theirs.stages) held.stages.push_back(std::move(stage));
        }
        event.kind = elastic_event_kind::failure;
        event.step = epoch;
        event.ranks = failed;
        event.from = mirror_layout_->describe();
        event.world_from = n;
        event.world_to = survivors.size();
        // No rank lost (the watchdog revoked the communicators over a stall that has ended):
        // the same layout, rolled back to the boundary.
        const parallel_config config =
            failed.empty() ? mirror_layout_->config() : choose_(survivors.size(), mirror_layout_->config());
        // State that no survivor and no buddy holds (a rank failed with the buddy that mirrored
        // it): the move leaves it zero, and the newest checkpoint then overwrites every rank's.
        // Every rank finds the same from the same layouts, without communicating.
        bool lost = false;
        try {
            train::engine_options next_options = engine.options();
            next_options.partition = {};
            static_cast<void>(elastic::plan_transition(
                *mirror_layout_, Engine::layout_type::layout_of(config, engine.model(), next_options),
                survivors.size(), sources));
        } catch (const elastic::state_lost& e) {
            lost = true;
            if (settings_.checkpoint_dir.empty() || !std::filesystem::exists(std::filesystem::path(settings_.checkpoint_dir) / "latest"))
                throw error(std::string(e.what()) + ": ranks " + format_ranks(failed) +
                            " failed together with the buddies that mirrored them, and there is no checkpoint to "
                            "restore from (--checkpoint-dir): the run ends here");
        }
        const auto report = engine.move_to_world(survivors, config, {.partition = {}, .staging_bytes = staging_bytes()},
                                                 sources, std::move(held), &*mirror_layout_, nullptr,
                                                 lost ? elastic::lost_state::zeroed : elastic::lost_state::refused);
        take_figures(event, report);
        long long resume_at = epoch;
        if (lost) {
            const auto restore = std::chrono::steady_clock::now();
            double step[1] = {0};
            if (!engine.is_spare())
                step[0] = static_cast<double>(
                    train::load_checkpoint_directory(engine, settings_.checkpoint_dir, "--checkpoint-dir").step);
            survivors.broadcast(std::as_writable_bytes(std::span<double>(step)), 0);  // rank 0 is in every layout
            resume_at = static_cast<long long>(step[0]);
            event.phases.restore_from_checkpoint = since(restore);
            event.step = resume_at;
        }
        world_ = &survivors;
        event.seconds_to_training = since(detected);
        mirror_due_ = true;
        return resume_at;
    }

    comm::mpi& keep(comm::mpi comm) {
        worlds_.push_back(std::move(comm));
        return worlds_.back();
    }
    [[nodiscard]] std::size_t staging_bytes() const {
        return static_cast<std::size_t>(settings_.staging_mib * 1048576.0);
    }

public:
    // The boundary the mirror last committed (every rank holds its copy of it: no failure
    // rolls the run back before it), or nullopt.
    [[nodiscard]] std::optional<long long> committed_boundary() const {
        if (!mirror_.committed()) return std::nullopt;
        return mirror_.epoch();
    }
    // The mirror's cost so far: refreshes, their total seconds on this rank, and the bytes the
    // last one keeps (this rank's copy and its predecessor's).
    [[nodiscard]] long long mirrors() const { return mirrors_; }
    [[nodiscard]] double mirror_seconds() const { return mirror_seconds_; }
    [[nodiscard]] std::size_t mirror_bytes() const { return mirror_bytes_; }

private:
    settings settings_;
    comm::mpi* world_;
    layout_chooser choose_;
    int launch_rank_;  // this process's rank in the world it was launched in (a joiner's: when it joined)
    bool just_joined_ = joined_running_world();
    bool still_leaving_ = false;  // this rank was leaving when a failure cut the move short
    int launch_size_;  // ranks launched (what --world-max defaults to; 0 on a joiner, which never reads the file)
    std::optional<leave_on_signal> leave_signal_;  // records the notice while the run trains
    std::optional<control_file> control_;
    std::list<comm::mpi> worlds_;  // the worlds made since the launch's (stable addresses)
    join_terms terms_;                      // what joiners must agree with (run/join_terms.hpp)
    std::optional<published_port> port_;     // rank 0 with --control: where --join jobs connect
    int grows_asked_ = 0;                    // processes asked for and not started yet (one start at a time)
    std::deque<int> accepts_asked_;          // --join jobs announced and agreed, not accepted yet
    std::deque<int> rank0_accepts_;          // rank 0: --join jobs announced, not agreed yet (one per boundary)
    std::vector<int> postponed_leavers_;     // leavers waiting for a --join job being accepted
    // What the grown layout needs (communicators, the move's plan), made by joining_'s start
    // (its thread writes it, and is joined before anything reads it): declared first,
    // destroyed after it.
    std::optional<typename Engine::prepared_layout> prepared_;
    std::unique_ptr<joiner_start> joining_;  // the processes being started
    long long grow_asked_at_ = 0;            // the boundary their grow was agreed at
    elastic::buddy_mirror<scalar> mirror_;
    std::optional<elastic::layout> mirror_layout_;  // the layout the mirror was taken in
    int mirror_rank_ = 0;                           // this rank's number then
    int mirror_world_ = 0;                          // and the world's size
    bool mirror_due_ = true;
    long long mirrors_ = 0;
    double mirror_seconds_ = 0;
    std::size_t mirror_bytes_ = 0;
};

}  // namespace weft::run
