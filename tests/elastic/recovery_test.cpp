// Elastic recovery's building blocks on threads (comm::local), so that every build runs them,
// the sanitizer presets included (the end-to-end runs, elastic_run.sh, need ULFM): transition
// plans with state sources, a crashed rank's state relocated from its buddy's mirror onto the
// survivors, a rank lost together with its buddy, snapshots taken and restored at every ZeRO
// stage, and a leave's move onto the ranks that stay. Each recovered run is checked against a
// run that switched to the same layout with reconfigure(): its state bit for bit, its losses.
// The survivors and the ranks that stay follow run/elastic_session.hpp's recover_from_mirror
// and leave; a mirror's copies pass here by shared memory instead of buddy_mirror's exchange
// (which needs comm::mpi's agree()).
//
// The names below carry a recovery_ prefix: the sanitizer presets build test_elastic as one
// translation unit with reconfigure_test.cpp and the others.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "elastic_layouts.hpp"
#include "weft/comm/local.hpp"
#include "whole_state.hpp"
#include "weft/elastic/state_snapshot.hpp"
#include "weft/elastic/transition_plan.hpp"
#include "weft/train/checkpoint.hpp"

namespace {

using recovery_comm = weft::comm::local;
using recovery_engine = weft_test::elastic::gpt_engine<recovery_comm>;
using recovery_layout = weft_test::elastic::named_layout;
using recovery_snapshot = weft::elastic::state_snapshot<float>;
using recovery_mirror = weft::elastic::buddy_mirror<float>;
using weft::elastic::state_source;

// Every tensor and optimizer state tensor of the model, whole, keyed by name.
using recovery_full_state = weft_test::whole_state;

weft::train::engine_options recovery_options(const recovery_layout& l) {
    auto o = weft_test::elastic::options();
    o.partition = l.partition;
    return o;
}

weft::elastic::layout recovery_map(const recovery_layout& l) {
    return recovery_engine::layout_type::layout_of(l.config(), weft_test::elastic::model(), recovery_options(l));
}

// The layouts the recoveries start from and go to.
recovery_layout recovery_pp2_dp2_zero1() {
    return weft_test::elastic::make("pp2 dp2 zero1", 2, 2, 1, 1, weft::sched::one_f_one_b::kind);
}
// Three ranks: 4 micro-batches (6 would not divide the batch's 8 rows).
recovery_layout recovery_pp3() {
    auto l = weft_test::elastic::make("pp3", 3, 1, 1, 0, weft::sched::one_f_one_b::kind);
    l.options.microbatches = 4;
    return l;
}
// Two of three ranks: the third waits as a spare.
recovery_layout recovery_pp2_of3() {
    return weft_test::elastic::make("pp2 world2", 2, 1, 1, 0, weft::sched::zb_h1::kind, 1, {}, 2);
}

// What a run did after its event, as its new rank 0 saw it.
struct recovery_outcome {
    std::vector<double> losses;     // the steps after the event
    recovery_full_state state;      // the whole state right after the event
    unsigned long long step = 0;    // the progress right after it
    std::vector<std::string> problems;
};

constexpr int recovery_steps_before = 3;
constexpr int recovery_steps_after = 3;

// Steps from the engine's data position; every rank of a layout reports the same loss.
std::vector<double> recovery_train(recovery_engine& engine, int steps) {
    std::vector<double> losses;
    for (int i = 0; i < steps; ++i)
        if (!engine.is_spare())
            losses.push_back(
                engine.step(weft_test::elastic::batch(static_cast<long long>(engine.progress().step))).loss);
    return losses;
}

// The reference: 4 ranks train in `from`, switch to `to` with reconfigure() (its ranks beyond
// to's world size wait as spares) and train on.
recovery_outcome recovery_reference(const recovery_layout& from, const recovery_layout& to) {
    std::mutex lock;
    recovery_full_state shared;
    recovery_outcome out;
    recovery_comm::run(4, [&](recovery_comm& world) {
        recovery_engine engine(world, from.config(), weft_test::elastic::model(), recovery_options(from));
        recovery_train(engine, recovery_steps_before);
        static_cast<void>(engine.reconfigure(to.config(), {.partition = to.partition}));
        auto state = weft_test::gather_whole_state(engine, world, shared, lock);
        const unsigned long long step = engine.is_spare() ? 0 : engine.progress().step;
        auto losses = recovery_train(engine, recovery_steps_after);
        if (world.rank() == 0) out = {std::move(losses), std::move(state), step, {}};
    });
    return out;
}

// Where each old rank's state is after `failed` ranks of `n` failed, as recover_from_mirror
// says: a survivor's own at its new rank; a failed rank's at its buddy's new rank, stages moved
// up by `offset`, or nowhere (-1) when the buddy failed too. new_rank_of[r]: -1 for the failed.
std::vector<state_source> recovery_sources(const std::vector<int>& new_rank_of, int offset) {
    const int n = static_cast<int>(new_rank_of.size());
    std::vector<state_source> sources(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        const int j = new_rank_of[static_cast<std::size_t>(r)];
        if (j >= 0) {
            sources[static_cast<std::size_t>(r)] = {j, 0};
            continue;
        }
        const int buddy = new_rank_of[static_cast<std::size_t>(recovery_mirror::buddy_of(r, n))];
        sources[static_cast<std::size_t>(r)] = buddy >= 0 ? state_source{buddy, offset} : state_source{-1, 0};
    }
    return sources;
}

// 4 ranks train in `from` and snapshot their state at the boundary (its buddy keeps a copy of
// each: here, shared memory); they train one more step, then rank `failed` crashes. The
// survivors form their communicator (a split: the failed rank takes no further part and
// returns), roll back to their snapshots, restore the failed rank's from its buddy's copy, move
// it all to `to` over the survivors (move_to_world with sources, held and the snapshot's
// layout) and train on from the boundary.
recovery_outcome recovery_after_crash(const recovery_layout& from, const recovery_layout& to, int failed) {
    std::mutex lock;
    recovery_full_state shared;
    recovery_outcome out;
    std::vector<recovery_snapshot> snapshots(4);
    recovery_comm::run(4, [&](recovery_comm& world) {
        std::optional<recovery_comm> survivors;  // outlives the engine, which goes on over it
        const auto options = recovery_options(from);
        recovery_engine engine(world, from.config(), weft_test::elastic::model(), options);
        recovery_train(engine, recovery_steps_before);
        const weft::elastic::layout at = engine.layout();
        const auto boundary_progress = engine.progress();
        {
            const std::lock_guard guard(lock);
            snapshots[static_cast<std::size_t>(world.rank())] =
                weft::elastic::take_snapshot(engine.parts().state(), recovery_steps_before);
        }
        // A step after the boundary, which the crash undoes: the survivors' engines hold its
        // state, and must move their snapshots' instead.
        static_cast<void>(engine.step(weft_test::elastic::batch(recovery_steps_before)));
        const int old_rank = world.rank();
        const int n = world.size();
        auto split = world.split(old_rank == failed ? 1 : 0, old_rank);
        if (old_rank == failed) return;  // crashed: nothing more of it runs
        survivors.emplace(std::move(split));
        // The old ranks of the survivors, in the new order (as recover_from_mirror learns them).
        std::vector<double> old_ranks(static_cast<std::size_t>(survivors->size()));
        const double mine[1] = {static_cast<double>(old_rank)};
        survivors->allgather(std::span<const double>(mine), std::span<double>(old_ranks));
        std::vector<int> new_rank_of(static_cast<std::size_t>(n), -1);
        for (std::size_t j = 0; j < old_ranks.size(); ++j)
            new_rank_of[static_cast<std::size_t>(old_ranks[j])] = static_cast<int>(j);
        const int offset = at.num_stages();
        const auto sources = recovery_sources(new_rank_of, offset);
        // This rank's state at the boundary, with its failed predecessor's beside it.
        const auto& own = snapshots[static_cast<std::size_t>(old_rank)];
        auto held = weft::elastic::restore_snapshot(own, at, old_rank, options.optimizer);
        const int predecessor = recovery_mirror::mirrored_by(old_rank, n);
        if (predecessor == failed) {
            auto theirs = weft::elastic::restore_snapshot(snapshots[static_cast<std::size_t>(failed)], at, failed,
                                                          options.optimizer, offset);
            for (auto& stage : theirs.stages) held.stages.push_back(std::move(stage));
        }
        static_cast<void>(engine.move_to_world(*survivors, to.config(), {.partition = to.partition}, sources,
                                               std::move(held), &at));
        auto state = weft_test::gather_whole_state(engine, *survivors, shared, lock);
        const unsigned long long step = engine.is_spare() ? 0 : engine.progress().step;
        auto losses = recovery_train(engine, recovery_steps_after);
        if (survivors->rank() == 0) {
            const std::lock_guard guard(lock);
            out.losses = std::move(losses);
            out.state = std::move(state);
            out.step = step;
            if (boundary_progress.step != recovery_steps_before) out.problems.push_back("boundary progress");
        }
    });
    return out;
}

// 4 ranks train in `from`; rank `leaver` leaves with notice, as elastic_session::leave does it:
// the ranks reorder with those who stay first, the state moves over them all to `to`, the
// leaver holds nothing and returns, and the ranks that stay train on over their communicator.
recovery_outcome recovery_after_leave(const recovery_layout& from, const recovery_layout& to, int leaver) {
    std::mutex lock;
    recovery_full_state shared;
    recovery_outcome out;
    recovery_comm::run(4, [&](recovery_comm& world) {
        std::optional<recovery_comm> moved_over, stays_on;  // outlive the engine
        recovery_engine engine(world, from.config(), weft_test::elastic::model(), recovery_options(from));
        recovery_train(engine, recovery_steps_before);
        const int n = world.size();
        const int leavers[1] = {leaver};
        const std::vector<state_source> sources = weft::elastic::stayers_first(n, leavers);
        const bool leaving = world.rank() == leaver;
        moved_over.emplace(world.split(0, sources[static_cast<std::size_t>(world.rank())].rank));
        stays_on.emplace(moved_over->split(leaving ? 1 : 0, moved_over->rank()));
        static_cast<void>(engine.move_to_world(*moved_over, to.config(), {.partition = to.partition}, sources,
                                               std::nullopt, nullptr, &*stays_on));
        if (leaving) {
            if (!engine.is_spare()) {
                const std::lock_guard guard(lock);
                out.problems.push_back("the leaver holds state after the move");
            }
            return;
        }
        auto state = weft_test::gather_whole_state(engine, *stays_on, shared, lock);
        const unsigned long long step = engine.is_spare() ? 0 : engine.progress().step;
        auto losses = recovery_train(engine, recovery_steps_after);
        if (stays_on->rank() == 0) {
            const std::lock_guard guard(lock);
            out.losses = std::move(losses);
            out.state = std::move(state);
            out.step = step;
        }
    });
    return out;
}

// Two ranks train in `from` (world 2, over their own communicator); two more join them, as an
// elastic grow takes them in: each builds an engine holding nothing in the running layout over
// the grown world of 4, the old ranks' coming first, and every rank moves onto it in `to`. With
// `made_ahead`, the new layout's communicators and the move's plan are made first
// (engine::prepare_layout; the joiners' state buffers too) and the move adopts them; a plan made
// from `planned_from` instead of `from` (a switch came between) is made anew in the move; without
// `communicators_ahead` (prepare_options.communicators off) the move splits them itself. (An
// elastic run makes them on a second thread while the first trains; on comm::local, whose
// deadlock check knows one waiting call per rank, they are made after the steps. The ft build's
// grow scenario runs them beside training.)
recovery_outcome recovery_after_grow(const recovery_layout& from, const recovery_layout& to, bool made_ahead,
                                     const recovery_layout* planned_from = nullptr, bool communicators_ahead = true) {
    std::mutex lock;
    recovery_full_state shared;
    recovery_outcome out;
    recovery_comm::run(4, [&](recovery_comm& grown) {
        const bool joiner = grown.rank() >= 2;
        auto old_world = grown.split(joiner ? 1 : 0, grown.rank());  // outlives the engine
        std::optional<recovery_engine> engine;
        std::optional<recovery_engine::prepared_layout> prepared;
        // Communicators start with their parent's timeout: those made ahead carry this one, and
        // show that the move adopted them rather than splitting the grown world again.
        const auto ahead_timeout = std::chrono::seconds(3600);
        // The joiners, which hold nothing, make their state buffers ahead too.
        const auto prepare = [&] {
            const auto timeout = grown.timeout();
            grown.set_timeout(ahead_timeout);
            const auto moving_from = recovery_map(planned_from != nullptr ? *planned_from : from);
            prepared.emplace(recovery_engine::prepare_layout(
                grown, to.config(), weft_test::elastic::model(), recovery_options(to),
                {.reserve_in = joiner ? &weft::host_state_memory() : nullptr,
                 .moving_from = &moving_from,
                 .communicators = communicators_ahead}));
            if (!prepared->plan) {
                const std::lock_guard guard(lock);
                out.problems.push_back("no plan made ahead");
            }
            grown.set_timeout(timeout);
        };
        if (joiner) {
            engine.emplace(grown, from.config(), weft_test::elastic::model(), recovery_options(from),
                           weft::train::joining);
            if (made_ahead) prepare();
        } else {
            engine.emplace(old_world, from.config(), weft_test::elastic::model(), recovery_options(from));
            recovery_train(*engine, recovery_steps_before);
            if (made_ahead) prepare();
        }
        weft::elastic::switch_report report;
        if (made_ahead) {
            if (!prepared->groups && communicators_ahead && grown.rank() < to.config().world_size()) {
                const std::lock_guard guard(lock);
                out.problems.push_back("a rank of the new layout was prepared no groups");
            }
            report = engine->move_to_grown_world(grown, to.config(), {.partition = to.partition}, std::move(*prepared));
        } else {
            report = engine->move_to_world(grown, to.config(), {.partition = to.partition}, {});
        }
        // Every buffer the joiners hold in the new layout was made ahead: their parameters,
        // gradients (ZeRO 0 and 1) and AdamW's two moments, which 3 steps have made.
        std::size_t joiners_state_bytes = 0;
        const auto next = recovery_map(to);
        for (const int joiner_rank : {2, 3})
            for (const std::size_t elements : weft::elastic::state_buffer_sizes(next, joiner_rank, 2))
                joiners_state_bytes += weft::elastic::detail::state_buffer_bytes<float>(elements);
        if (joiners_state_bytes == 0 || report.bytes_made_ahead != (made_ahead ? joiners_state_bytes : 0) ||
            !report.within_memory_bound) {
            const std::lock_guard guard(lock);
            out.problems.push_back("made ahead: " + std::to_string(report.bytes_made_ahead) + " bytes, of the " +
                                   std::to_string(joiners_state_bytes) + " the joiners hold; within the bound: " +
                                   (report.within_memory_bound ? "yes" : "no"));
        }
        if (!engine->is_spare()) {
            auto& parts = engine->parts();
            for (auto* group : {&parts.pipeline_group(), &parts.data_group(), &parts.tensor_group()})
                if ((group->timeout() == weft::comm::timeout_duration(ahead_timeout)) !=
                    (made_ahead && communicators_ahead)) {
                    const std::lock_guard guard(lock);
                    out.problems.push_back(made_ahead && communicators_ahead
                                               ? "a group made ahead was split again in the move"
                                                      : "a group has the timeout of groups made ahead");
                }
        }
        auto state = weft_test::gather_whole_state(*engine, grown, shared, lock);
        const unsigned long long step = engine->is_spare() ? 0 : engine->progress().step;
        auto losses = recovery_train(*engine, recovery_steps_after);
        if (grown.rank() == 0) {
            const std::lock_guard guard(lock);
            out.losses = std::move(losses);
            out.state = std::move(state);
            out.step = step;
        }
    });
    return out;
}

// Within 1e-6 relative (they are equal where the reduction order is).
bool recovery_close(const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (!(std::abs(a[i] - b[i]) <= 1e-6 * std::max(std::abs(a[i]), std::abs(b[i])))) return false;
    return true;
}

std::string recovery_text(const std::vector<double>& v) {
    std::string s;
    for (const double x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
    return s;
}

void recovery_check_against(const recovery_outcome& got, const recovery_outcome& expected) {
    for (const auto& p : got.problems) UNSCOPED_INFO(p);
    CHECK(got.problems.empty());
    REQUIRE(expected.losses.size() == static_cast<std::size_t>(recovery_steps_after));
    INFO("losses " << recovery_text(got.losses) << ", reference " << recovery_text(expected.losses));
    CHECK(recovery_close(got.losses, expected.losses));
    CHECK(got.step == static_cast<unsigned long long>(recovery_steps_before));
    CHECK(!expected.state.empty());
    CHECK(got.state.size() == expected.state.size());
    std::size_t differing = 0;
    for (const auto& [name, values] : expected.state) {
        const auto it = got.state.find(name);
        if (it == got.state.end() || it->second != values) {
            if (differing < 5) UNSCOPED_INFO(name << " differs from the reference's");
            ++differing;
        }
    }
    CHECK(differing == 0);
}

bool recovery_same_transfers(const weft::elastic::transition_plan& a, const weft::elastic::transition_plan& b) {
    const auto& x = a.transfers();
    const auto& y = b.transfers();
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](const auto& s, const auto& t) {
               return s.what == t.what && s.from == t.from && s.to == t.to && s.from_stage == t.from_stage &&
                      s.to_stage == t.to_stage && s.from_flat == t.from_flat && s.to_flat == t.to_flat &&
                      s.length == t.length && s.from_new == t.from_new;
           });
}

}  // namespace

TEST_CASE("a transition plan with identity sources is the plan without sources", "[elastic][recovery][plan]") {
    const auto layouts = weft_test::elastic::world4_layouts();
    // Pipeline to ZeRO-3 replicas, tensor to data parallel, replicas to a V-shaped pipeline,
    // an uneven partition to tp 4, two ranks (spares beside them) to interleaved pp 4, and
    // pp2 x dp2 ZeRO-1 to itself.
    const std::pair<int, int> pairs[] = {{0, 6}, {8, 2}, {3, 12}, {10, 7}, {13, 1}, {2, 2}, {2, 13}};
    for (const auto& [a, b] : pairs) {
        const auto& from = layouts[static_cast<std::size_t>(a)];
        const auto& to = layouts[static_cast<std::size_t>(b)];
        INFO(from.name << " -> " << to.name);
        const auto from_map = recovery_map(from);
        const auto to_map = recovery_map(to);
        std::vector<state_source> identity;
        for (int r = 0; r < from_map.ranks(); ++r) identity.push_back({r, 0});
        const auto plain = weft::elastic::plan_transition(from_map, to_map, 4);
        const auto sourced = weft::elastic::plan_transition(from_map, to_map, 4, identity);
        CHECK(!plain.transfers().empty());
        CHECK(recovery_same_transfers(plain, sourced));
        for (const auto what : {weft::elastic::held_class::parameters, weft::elastic::held_class::optimizer_state}) {
            CHECK(sourced.lower_bound_elements(what) == plain.lower_bound_elements(what));
            CHECK(sourced.elements_sent(what) == plain.elements_sent(what));
        }
    }
    // And sources that move the state do change the plan: every rank's state one rank on.
    const auto pp4 = recovery_map(layouts[0]);
    const std::vector<state_source> shifted = {{1, 0}, {2, 0}, {3, 0}, {0, 0}};
    const auto stay = weft::elastic::plan_transition(pp4, pp4, 4);
    const auto moved = weft::elastic::plan_transition(pp4, pp4, 4, shifted);
    CHECK(stay.elements_sent(weft::elastic::held_class::parameters) == 0);
    CHECK(moved.elements_sent(weft::elastic::held_class::parameters) > 0);
    CHECK(moved.elements_sent(weft::elastic::held_class::parameters) ==
          moved.lower_bound_elements(weft::elastic::held_class::parameters));
}

TEST_CASE("a rank lost together with its buddy is a state_lost naming the tensor", "[elastic][recovery][plan]") {
    const auto layouts = weft_test::elastic::world4_layouts();
    const auto pp4 = recovery_map(layouts[0]);  // no replicas: each stage on one rank only
    const auto pp2 = recovery_map(weft_test::elastic::make("pp2", 2, 1, 1, 0, weft::sched::one_f_one_b::kind));
    const int offset = pp4.num_stages();
    // Ranks 1 and 2 fail: rank 1's buddy (2) failed with it; rank 2's (3) holds its mirror.
    const auto sources = recovery_sources({0, -1, -1, 1}, offset);
    REQUIRE(sources[1] == state_source{-1, 0});
    REQUIRE(sources[2] == state_source{1, offset});
    std::vector<std::string> lost_names, kept_names;
    for (const int r : {0, 1, 2, 3}) {
        const auto holdings = pp4.holdings(r);
        for (const auto& info : holdings.front().registry.entries())
            (r == 1 ? lost_names : kept_names).push_back(info.name);
    }
    REQUIRE(!lost_names.empty());
    std::string message;
    try {
        static_cast<void>(weft::elastic::plan_transition(pp4, pp2, 2, sources));
    } catch (const weft::elastic::state_lost& e) {
        message = e.what();
    }
    INFO("state_lost: " << message);
    REQUIRE(!message.empty());
    CHECK(std::any_of(lost_names.begin(), lost_names.end(),
                      [&](const std::string& name) { return message.find(name) != std::string::npos; }));
    // It names the lost tensor, not one a survivor or a mirror still holds.
    for (const auto& name : kept_names)
        if (std::find(lost_names.begin(), lost_names.end(), name) == lost_names.end()) {
            INFO("kept: " << name);
            CHECK(message.find(name) == std::string::npos);
        }
    // Any one failed rank, or two that are not each other's buddy, leave every state a source.
    for (const std::vector<int>& new_rank_of :
         {std::vector<int>{-1, 0, 1, 2}, std::vector<int>{0, -1, 1, 2}, std::vector<int>{0, 1, -1, 2},
          std::vector<int>{0, 1, 2, -1}, std::vector<int>{0, -1, 1, -1}, std::vector<int>{-1, 0, -1, 1}}) {
        const int survivors = static_cast<int>(std::count_if(new_rank_of.begin(), new_rank_of.end(), [](int j) { return j >= 0; }));
        const auto plan = weft::elastic::plan_transition(pp4, pp2, survivors, recovery_sources(new_rank_of, offset));
        CHECK(plan.elements_sent(weft::elastic::held_class::parameters) ==
              plan.lower_bound_elements(weft::elastic::held_class::parameters));
    }
}

TEST_CASE("a crashed rank's state comes back from its buddy's mirror onto the survivors, as a switch gives it",
          "[elastic][recovery][crash]") {
    const auto from = recovery_pp2_dp2_zero1();
    for (const auto& to : {recovery_pp3(), recovery_pp2_of3()}) {
        const auto reference = recovery_reference(from, to);
        for (int failed = 0; failed < 4; ++failed) {
            INFO(from.name << " -> " << to.name << " over the survivors of rank " << failed);
            recovery_check_against(recovery_after_crash(from, to, failed), reference);
        }
    }
}

TEST_CASE("a snapshot restores the state at every ZeRO stage, and training goes on from it as from the original",
          "[elastic][recovery][snapshot]") {
    const auto layouts = weft_test::elastic::world4_layouts();
    // dp4 at ZeRO 0, 1, 2 and 3, a pipeline of ZeRO-3 replicas with an uneven partition, and a
    // V-shaped pipeline (two stages a rank) at ZeRO 2.
    for (const int index : {3, 4, 5, 6, 10, 12}) {
        const auto& l = layouts[static_cast<std::size_t>(index)];
        INFO(l.name);
        std::mutex lock;
        std::vector<std::string> problems;
        std::vector<double> original, built, rolled_back;
        constexpr double rate = 0.0071;
        recovery_comm::run(4, [&](recovery_comm& world) {
            const auto options = recovery_options(l);
            const auto problem = [&](const std::string& what) {
                const std::lock_guard guard(lock);
                problems.push_back("rank " + std::to_string(world.rank()) + ": " + what);
            };
            recovery_engine engine(world, l.config(), weft_test::elastic::model(), options);
            recovery_train(engine, 2);
            engine.set_learning_rate(rate);
            const auto snapshot = weft::elastic::take_snapshot(engine.parts().state(), 2);
            {
                const auto& before = engine.parts().state();
                const auto restored =
                    weft::elastic::restore_snapshot(snapshot, engine.layout(), world.rank(), options.optimizer);
                if (restored.progress != before.progress) problem("progress");
                if (restored.stage_indices() != before.stage_indices()) problem("stages");
                for (std::size_t i = 0; i < before.stages.size() && i < restored.stages.size(); ++i) {
                    const auto& a = before.stages[i];
                    const auto& b = restored.stages[i];
                    const std::string stage = "stage " + std::to_string(a.index) + ": ";
                    if (a.units != b.units) problem(stage + "units");
                    if (a.tensors.zero_stage != b.tensors.zero_stage) problem(stage + "zero stage");
                    if (a.tensors.range.offset != b.tensors.range.offset || a.tensors.range.size != b.tensors.range.size ||
                        a.tensors.range.total != b.tensors.range.total)
                        problem(stage + "range");
                    const auto& pa = a.tensors.zero_stage == 3 ? a.tensors.parameter_range
                                                                : a.tensors.full.parameter_storage();
                    const auto& pb = b.tensors.zero_stage == 3 ? b.tensors.parameter_range
                                                                : b.tensors.full.parameter_storage();
                    if (pa.empty() || !std::equal(pa.begin(), pa.end(), pb.begin(), pb.end())) problem(stage + "parameters");
                    const auto va = a.optimizer.state_views();
                    const auto vb = b.optimizer.state_views();
                    if (va.size() != vb.size()) problem(stage + "optimizer state tensors");
                    for (std::size_t k = 0; k < va.size() && k < vb.size(); ++k)
                        if (va[k].name != vb[k].name || va[k].values.empty() ||
                            !std::equal(va[k].values.begin(), va[k].values.end(), vb[k].values.begin(),
                                        vb[k].values.end()))
                            problem(stage + "optimizer state " + std::string(va[k].name));
                    if (a.optimizer.step_count() != b.optimizer.step_count() || b.optimizer.step_count() != 2)
                        problem(stage + "optimizer steps");
                    if (b.optimizer.lr() != rate) problem(stage + "learning rate");
                }
            }
            // The original trains on.
            auto losses = recovery_train(engine, 2);
            // An engine built on the restored state (its optimizers take the options' rate: the
            // run sets its own, as after a resume) trains on as the original did.
            {
                recovery_engine copy(world, l.config(), weft_test::elastic::model(), options,
                                     weft::elastic::restore_snapshot(snapshot, engine.layout(), world.rank(),
                                                                     options.optimizer));
                if (copy.progress().step != 2) problem("progress of the engine built on the snapshot");
                copy.set_learning_rate(rate);
                auto again = recovery_train(copy, 2);
                if (world.rank() == 0) built = std::move(again);
            }
            // And the original, rolled back to the snapshot by a move with identity sources
            // (the learning rate comes with the state).
            std::vector<state_source> identity;
            for (int r = 0; r < world.size(); ++r) identity.push_back({r, 0});
            static_cast<void>(engine.move_to_world(
                world, l.config(), {.partition = l.partition}, identity,
                weft::elastic::restore_snapshot(snapshot, engine.layout(), world.rank(), options.optimizer)));
            if (engine.progress().step != 2) problem("progress after the rollback");
            for (const int s : engine.parts().local_stages())
                if (engine.parts().stage_optimizer(s).lr() != rate) problem("learning rate after the rollback");
            auto redone = recovery_train(engine, 2);
            if (world.rank() == 0) {
                original = std::move(losses);
                rolled_back = std::move(redone);
            }
        });
        for (const auto& p : problems) UNSCOPED_INFO(p);
        CHECK(problems.empty());
        REQUIRE(original.size() == 2);
        INFO("original " << recovery_text(original) << ", built on the snapshot " << recovery_text(built)
                         << ", rolled back " << recovery_text(rolled_back));
        CHECK(recovery_close(built, original));
        CHECK(recovery_close(rolled_back, original));
    }
}

TEST_CASE("a leaver's state moves onto the ranks that stay, as a switch gives it", "[elastic][recovery][leave]") {
    const auto from = recovery_pp2_dp2_zero1();
    const auto to = recovery_pp3();
    const auto reference = recovery_reference(from, to);
    for (const int leaver : {2, 0}) {
        INFO(from.name << " -> " << to.name << " as rank " << leaver << " leaves");
        recovery_check_against(recovery_after_leave(from, to, leaver), reference);
    }
}

// A grow, as elastic_session's finish_grow and run::trainer's join make it: the joiners' state
// comes from the old ranks exactly as a switch gives it, whether the new layout's communicators
// are split during the move or made ahead while the old ranks train (issue 48: the joiners'
// communicator construction overlaps training). To a layout with a spare, the split of the
// layout's ranks is made ahead too.
TEST_CASE("a grow's joiners train on as a switch gives it, with the new layout's groups made ahead or not",
          "[elastic][recovery][grow]") {
    const auto from = weft_test::elastic::make("pp2 world2", 2, 1, 1, 0, weft::sched::one_f_one_b::kind, 1, {}, 2);
    for (const auto& to : {recovery_pp2_dp2_zero1(), recovery_pp3()}) {
        const auto reference = recovery_reference(from, to);
        for (const bool made_ahead : {false, true}) {
            INFO(from.name << " -> " << to.name << (made_ahead ? ", made ahead" : ", made in the move"));
            recovery_check_against(recovery_after_grow(from, to, made_ahead), reference);
        }
        {
            const auto other = weft_test::elastic::make("dp2", 1, 2, 1, 0, weft::sched::gpipe::kind);
            INFO(from.name << " -> " << to.name << ", made ahead with a plan from " << other.name);
            recovery_check_against(recovery_after_grow(from, to, true, &other), reference);
        }
        {
            INFO(from.name << " -> " << to.name << ", plan and buffers made ahead, communicators in the move");
            recovery_check_against(recovery_after_grow(from, to, true, nullptr, false), reference);
        }
    }
}

// Communicators made for another layout are refused on every rank before any byte moves,
// naming the parameter, and the engines go on in the layout they had.
TEST_CASE("communicators made ahead for another layout are refused before anything moves",
          "[elastic][recovery][grow]") {
    const auto from = recovery_pp2_dp2_zero1();
    const auto to = recovery_pp3();
    std::mutex lock;
    std::vector<std::string> refusals;
    std::vector<double> losses_after;
    recovery_comm::run(4, [&](recovery_comm& world) {
        recovery_engine engine(world, from.config(), weft_test::elastic::model(), recovery_options(from));
        recovery_train(engine, 1);
        // Made for pp2 dp2 zero1 (the running layout), handed to a move to pp3.
        auto prepared = recovery_engine::prepare_layout(world, from.config(), weft_test::elastic::model(),
                                                        recovery_options(from));
        try {
            static_cast<void>(engine.move_to_grown_world(world, to.config(), {.partition = to.partition},
                                                         std::move(prepared)));
        } catch (const weft::error& e) {
            const std::lock_guard guard(lock);
            refusals.emplace_back(e.what());
        }
        const auto losses = recovery_train(engine, 1);
        if (world.rank() == 0) losses_after = losses;
    });
    REQUIRE(refusals.size() == 4);
    for (const auto& refusal : refusals) {
        INFO(refusal);
        CHECK(refusal.find("prepared layout") != std::string::npos);
        CHECK(refusal.find("nothing moved") == std::string::npos);  // its own error, not another rank's vote
    }
    CHECK(losses_after.size() == 1);
}

// The planner may choose a layout on fewer ranks than stay (run/elastic_layout.hpp: "a layout
// on fewer leaves the rest as spares"); elastic_session::leave then passes the communicator of
// every rank that stays as `stays_on`, as here: the stayer beyond the layout waits as a spare.
// (move_to_world once required stays_on to be exactly the layout's ranks, and threw after the
// state had moved.)
TEST_CASE("a leave to a layout with a spare among the ranks that stay", "[elastic][recovery][leave]") {
    const auto from = recovery_pp2_dp2_zero1();
    const auto to = recovery_pp2_of3();
    const auto reference = recovery_reference(from, to);
    INFO(from.name << " -> " << to.name << " as rank 2 leaves");
    recovery_check_against(recovery_after_leave(from, to, 2), reference);
}
