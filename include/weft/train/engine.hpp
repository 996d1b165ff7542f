// weft::engine: a training loop whose parallel layout can change between steps. It holds
// the engine of the current layout (train/layout_engine.hpp) and, on reconfigure(), moves the
// training state in memory to the new layout (include/weft/elastic/) and builds the new
// layout's engine around it: pp, dp, tp, ZeRO stage, schedule (among the compile-time set),
// chunks, partition and world size may all change, and the state stays exact.
//
// The world the engine is built on is every rank that takes part in switches. A layout may
// use fewer of them: ranks [world_size, world.size()) are then spares, holding nothing, until
// a later switch brings them back. Everything but reconfigure() needs a rank of the layout.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/host_side.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/elastic/reserved_buffers.hpp"
#include "weft/elastic/switch_report.hpp"
#include "weft/elastic/transfer.hpp"
#include "weft/elastic/transition_plan.hpp"
#include "weft/exec/action_key.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/models/mlp.hpp"
#include "weft/models/pipeline_model.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/training_state.hpp"
#include "weft/train/engine_options.hpp"
#include "weft/train/layout_engine.hpp"

namespace weft::train {

namespace detail {

// Whether the five policies fit together: each models its concept, and the communicator
// can reach the backend's memory.
template <class Schedules, class Sharding, class Comm, class Backend, class Model>
constexpr bool policies_compose() {
    if constexpr (!communicator<Comm> || !compute_backend<Backend>) {
        return false;
    } else {
        using scalar = typename Backend::scalar;
        return accessible_from<typename Comm::memory_space, typename Backend::memory_space> &&
               sched::schedule_set<Schedules> && shard::sharding_for<Sharding, scalar, Comm> &&
               models::pipeline_model<Model, Backend> &&
               (std::is_same_v<scalar, float> || std::is_same_v<scalar, double>);
    }
}

// Instantiates the require_<concept> of each policy in turn, up to the first that fails, so
// that a composition that does not fit stops with exactly one message.
template <class Schedules, class Sharding, class Comm, class Backend, class Model>
constexpr bool diagnose_policies() {
    if constexpr (!communicator<Comm>) {
        return sizeof(comm::require_communicator<Comm>) > 0;
    } else if constexpr (!compute_backend<Backend>) {
        return sizeof(exec::require_compute_backend<Backend>) > 0;
    } else if constexpr (!accessible_from<typename Comm::memory_space, typename Backend::memory_space>) {
        static_assert(accessible_from<typename Comm::memory_space, typename Backend::memory_space>,
                      "weft::engine: the communicator cannot reach the compute backend's memory (weft::comm::nccl "
                      "moves device memory, weft::exec::cpu computes in host memory): pair a host communicator "
                      "(comm::local, comm::mpi) with a host backend, and comm::nccl with a device backend");
        return true;
    } else if constexpr (!sched::schedule_set<Schedules>) {
        return sizeof(sched::require_schedule_set<Schedules>) > 0;
    } else if constexpr (!shard::sharding_for<Sharding, typename Backend::scalar, Comm>) {
        return sizeof(shard::require_sharding<Sharding, typename Backend::scalar, Comm>) > 0;
    } else if constexpr (!models::pipeline_model<Model, Backend>) {
        return sizeof(models::require_pipeline_model<Model, Backend>) > 0;
    } else {
        static_assert(std::is_same_v<typename Backend::scalar, float> ||
                          std::is_same_v<typename Backend::scalar, double>,
                      "weft::engine: the backend's scalar must be float or double");
        return true;
    }
}

}  // namespace detail

// The policies do not fit: the body is the check that names the first one that does not (a
// CUTLASS-style primary template), so the compiler stops with that one message.
template <class Schedules, class Sharding, class Comm, class Backend, class Model = models::mlp,
          bool Composes = detail::policies_compose<Schedules, Sharding, Comm, Backend, Model>()>
class engine {
    static_assert(detail::diagnose_policies<Schedules, Sharding, Comm, Backend, Model>());

public:
    // Declared and never defined: a program constructs its engine and steps it, and without
    // these the compiler would add "too many initializers" and "no member named 'step'" to the
    // one message above. They take what the real engine's constructors and step take (its
    // model config, state or program, and batch types belong to the policies that may be the
    // ones that do not fit, so they are deduced); nothing links, as the build has stopped.
    template <class World, class ModelConfig, class... Rest>
    engine(World& world, const parallel_config& config, const ModelConfig& model, const engine_options& options,
           Rest&&... rest);
    template <class Batch>
    step_stats step(const Batch& batch);
    template <class Batch>
    double evaluate(const Batch& batch);
};


// Tag of the engine constructor for a rank joining a running world (an elastic run's grow).
struct joining_t {
    explicit joining_t() = default;
};
inline constexpr joining_t joining{};

// How reconfigure() switches: the new layout's partition (unit counts per stage; empty: the
// default) and the staging cap.
struct reconfigure_options {
    std::vector<int> partition;
    std::size_t staging_bytes = std::size_t{64} << 20;
};

template <class Schedules, class Sharding, class Comm, class Backend, class Model>
class engine<Schedules, Sharding, Comm, Backend, Model, true> {
    static_assert(detail::diagnose_policies<Schedules, Sharding, Comm, Backend, Model>());

public:
    using layout_type = layout_engine<Schedules, Sharding, Comm, Backend, Model>;
    using schedules = typename layout_type::schedules;
    using scalar = typename layout_type::scalar;
    using matrix = typename layout_type::matrix;
    using model_type = typename layout_type::model_type;
    using model_config = typename layout_type::model_config;
    using batch_type = typename layout_type::batch_type;
    using stage_type = typename layout_type::stage_type;
    using runner_type = typename layout_type::runner_type;
    using sharding_type = typename layout_type::sharding_type;
    using state_type = typename layout_type::state_type;
    using groups_type = typename layout_type::groups_type;
    static constexpr bool tensor_parallel_model = layout_type::tensor_parallel_model;

    // Collective over `world`: every rank constructs its engine with the same arguments. The
    // schedule is config.schedule(), or the set's first when none is chosen (config() then
    // reports that one), generated for (pp, microbatches, chunks); training starts from the
    // model's initial weights. Ranks from config.world_size() on are spares.
    engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
           Backend backend = Backend{})
        : world_(&world), model_(model), options_(options) {
        layout_.emplace(layout_type::layout_of(checked_world(world, config), model, options));
        if (Comm* active = activate(config.world_size()))
            core_ = std::make_unique<layout_type>(*active, config, model, options, std::move(backend));
        else
            spare_backend_.emplace(std::move(backend));
    }

    // A rank joining a running world (an elastic run's grow): it holds nothing in the current
    // layout `config` (whose world size is below world.size(), with options.partition) until
    // the move_to_world over `world` that every rank makes next. Not collective: the ranks
    // already training have their engines.
    engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
           joining_t, Backend backend = Backend{})
        : world_(&world), model_(model), options_(options) {
        layout_.emplace(layout_type::layout_of(checked_world(world, config), model, options));
        require(world.rank() >= config.world_size(), "joining rank", world.rank(),
                "must be beyond the running layout's " + std::to_string(config.world_size()) + " ranks");
        spare_backend_.emplace(std::move(backend));
    }

    // Runs a given compute-only program (e.g. one read from PyTorch's CSV) instead of
    // generating one; it must be for config.pp() ranks and config.microbatches(). A switch
    // away from it generates the new layout's schedule.
    engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
           const sched::program& compute_only, Backend backend = Backend{})
        : world_(&world), model_(model), options_(options) {
        require(world.size() == config.world_size(), "communicator size", world.size(),
                "must equal the config's world size " + std::to_string(config.world_size()) +
                    " when the engine runs a given program");
        core_ = std::make_unique<layout_type>(world, config, model, options, compute_only, std::move(backend));
        layout_.emplace(core_->current_layout());
    }

    // Continues from `state` (another engine's release_state()): it must hold this rank's
    // stages of this layout, with tensors of their layouts and the optimizer `options` names;
    // its progress carries on. Checked before anything runs. No spares.
    engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
           state_type state, Backend backend = Backend{})
        : world_(&world), model_(model), options_(options) {
        require(world.size() == config.world_size(), "communicator size", world.size(),
                "must equal the config's world size " + std::to_string(config.world_size()) +
                    " when the engine continues from a released state");
        core_ = std::make_unique<layout_type>(world, config, model, options, std::move(state), std::move(backend));
        layout_.emplace(core_->current_layout());
    }

    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;
    engine(engine&&) = delete;
    engine& operator=(engine&&) = delete;
    ~engine() = default;

    // ---- switching layouts -------------------------------------------------------------
    // Moves the training state to the layout `config` (with how.partition) gives and goes on
    // in it: between steps, collective over the whole world, spares included, every rank with
    // the same arguments. The new layout is checked on every rank before any byte moves; one
    // that cannot run is a weft::error naming the parameter, and the engine stays as it was.
    // Parameters, optimizer state, progress and learning rate carry over exactly.
    elastic::switch_report reconfigure(const parallel_config& config, const reconfigure_options& how = {}) {
        return switch_onto(*world_, *world_, config, how, {}, std::nullopt, elastic::lost_state::refused);
    }

    // Moves the training state onto another communicator, `next_world`, in the layout `config`
    // gives, and goes on there: the ranks that stay after some leave (a split of the world), the
    // survivors of a failure (a shrink of it), or the world grown by joiners (a merge). Collective
    // over next_world, every rank with the same arguments but `held`. `sources[r]` says where old
    // rank r's state is on next_world (elastic::state_source; empty: rank r of next_world holds
    // it, as in a grown world whose old ranks come first). `held`: this rank's state to move
    // instead of the engine's own, e.g. the snapshot a failed step rolls back to, with the
    // mirrors of failed ranks beside it (their stages moved up by their sources' offsets); the
    // engine's own is then dropped; `held_layout`, the layout `held` is in, when it is not the
    // engine's current one (a failure during a switch rolls back to the layout before it). A
    // joiner's engine (a spare in a layout of the old world
    // size) takes part like any rank. Throws elastic::state_lost, with the engine unusable,
    // when some state has no source left, or with `lost` = zeroed leaves it zero (for a
    // checkpoint to overwrite); any other problem is found before a byte moves.
    // The engine then refers to next_world, which must outlive it or the next such move.
    // `stays_on`: when the ranks that train on are fewer than those the state moves among (a
    // leave: the leavers send theirs and go), the communicator of the first ranks of
    // next_world, in its order, that the engine goes on with (at least the new layout's; the
    // rest of them wait as spares); a leaver passes its own communicator of leavers, and holds
    // nothing after the move.
    elastic::switch_report move_to_world(Comm& next_world, const parallel_config& config,
                                         const reconfigure_options& how,
                                         std::span<const elastic::state_source> sources,
                                         std::optional<state_type> held = std::nullopt,
                                         const elastic::layout* held_layout = nullptr, Comm* stays_on = nullptr,
                                         elastic::lost_state lost = elastic::lost_state::refused) {
        if (held_layout != nullptr) layout_.emplace(*held_layout);
        return switch_onto(next_world, stays_on != nullptr ? *stays_on : next_world, config, how, sources,
                           std::move(held), lost);
    }

    // ---- a grow's communicators, plan and buffers, made ahead ------------------------
    // What a layout needs over a world, made before the move onto it (prepare_layout), so that
    // the move adopts it instead of making it: its communicators, the transition plan from the
    // layout the move will start in, and for a rank that holds nothing before the move (a
    // joiner) its state buffers, in memory. An elastic grow makes them on the old ranks' start
    // thread and on the joiners while the old ranks train on.
    struct prepared_layout {
        std::string layout;                 // what they were made for: the layout's describe()
        int rank = -1;                      // this rank in the world they were made over
        int world_size = 0;                 // and its size
        bool communicators_made = false;    // false: the move splits them (prepare_options)
        std::optional<Comm> active;         // the layout's ranks (or the spares), when not all of them
        std::optional<groups_type> groups;  // the layout engine's groups; none on a spare
        elastic::reserved_buffers<scalar> reserved;  // the state buffers made ahead, if any
        std::optional<elastic::transition_plan> plan;  // from `plan_from` (none: planned in the move)
        std::string plan_from;                         // that layout's describe()
    };
    // What prepare_layout makes besides the communicators.
    struct prepare_options {
        // For a rank that holds nothing now (a joiner): the memory to make its new state buffers
        // in, every page of them in memory (the backend's state_memory()). Null makes none, as
        // a rank that holds state should: its switch fills new buffers page by page as it
        // empties its old ones, within its memory bound.
        const state_memory* reserve_in = nullptr;
        // The layout the move will start in (the running one; every rank's alike): its plan is
        // made now. A move that starts in another (a switch came between) plans anew.
        const elastic::layout* moving_from = nullptr;
        // Whether to make the communicators now; false leaves their splits to the move (every
        // rank alike), for a caller that cannot split where it prepares.
        bool communicators = true;
    };

    // Collective over `world`, every rank with the same arguments but how.reserve_in: the
    // communicators of the layout `config` gives (with options.partition) over `world`, for
    // move_to_grown_world() onto it, and what `how` asks for. Checked as a switch checks the
    // layout (a weft::error naming the parameter). Nothing of a running engine is touched, so
    // another thread may train meanwhile.
    [[nodiscard]] static prepared_layout prepare_layout(Comm& world, const parallel_config& config,
                                                        const model_config& model, const engine_options& options,
                                                        const prepare_options& how = {}) {
        prepared_layout out;
        const elastic::layout next = layout_type::layout_of(checked_world(world, config), model, options);
        out.layout = next.describe();
        out.rank = world.rank();
        out.world_size = world.size();
        if (how.moving_from != nullptr) {
            out.plan.emplace(elastic::plan_transition(*how.moving_from, next, world.size(), {},
                                                      elastic::lost_state::refused));
            out.plan_from = how.moving_from->describe();
        }
        // The buffers first: over a grow, the old ranks' splits below then wait for the joiners'
        // buffers, so that an old rank's start is done only once they are in memory too. They
        // only save the move time: where the memory refuses them, the move makes its own, and
        // this rank still meets the others in the splits.
        if (how.reserve_in != nullptr) {
            try {
                out.reserved = elastic::reserved_buffers<scalar>(
                    elastic::state_buffer_sizes(next, world.rank(),
                                                optim::any_optimizer<scalar>(options.optimizer).state_names().size()),
                    *how.reserve_in);
            } catch (const std::bad_alloc&) {
                out.reserved = {};
            }
        }
        if (!how.communicators) return out;
        out.communicators_made = true;
        Comm* over = &world;
        if (config.world_size() != world.size()) {  // as activate() splits it
            const bool in_layout = world.rank() < config.world_size();
            out.active.emplace(world.split(in_layout ? 0 : 1, world.rank()));
            over = in_layout ? &*out.active : nullptr;
        }
        if (over != nullptr) out.groups.emplace(layout_type::make_groups(*over, config, model, options));
        return out;
    }

    // move_to_world onto a world whose first ranks are this world's, in order, with no sources
    // (a grow: the joiners come after), with what prepare_layout() made ahead over `next_world`
    // for `config` and how.partition: its communicators, plan and buffers. Made for another
    // layout, world or rank, they are refused on every rank before any byte moves, and the
    // engine stays as it was.
    elastic::switch_report move_to_grown_world(Comm& next_world, const parallel_config& config,
                                               const reconfigure_options& how, prepared_layout prepared) {
        return switch_onto(next_world, next_world, config, how, {}, std::nullopt, elastic::lost_state::refused,
                           &prepared);
    }

    // Whether this rank holds nothing in the current layout (it waits for a switch).
    [[nodiscard]] bool is_spare() const { return core_ == nullptr; }
    // The current layout's ownership map (every rank's, spares' included).
    [[nodiscard]] const elastic::layout& layout() const { return *layout_; }
    // Every rank taking part in switches.
    [[nodiscard]] Comm& world() { return *world_; }

    // ---- training (ranks of the layout) ----------------------------------------------
    step_stats step(const batch_type& batch) { return active().step(batch); }
    double evaluate(const batch_type& batch) { return active().evaluate(batch); }

    // ---- the run's view: what a training loop reads and sets --------------------------
    [[nodiscard]] const shard::training_progress& progress() const { return active().progress(); }
    void set_learning_rate(double lr) { active().set_learning_rate(lr); }
    [[nodiscard]] Backend& backend() { return core_ ? core_->backend() : *spare_backend_; }
    [[nodiscard]] const parallel_config& config() const { return layout_->config(); }
    [[nodiscard]] const engine_options& options() const { return options_; }
    [[nodiscard]] const model_config& model() const { return model_; }
    [[nodiscard]] memory_report memory() const { return active().memory(); }
    // Hands the training state over (to build an engine around it); this engine must not
    // step again.
    [[nodiscard]] state_type release_state() && { return std::move(active()).release_state(); }

    // ---- the parts: the current layout's engine (train/layout_engine.hpp) --------------
    // Its training state, stages and their optimizers and shardings, process groups, program
    // and what its last step did, for checkpoints, tests and tools; a spare has none (it
    // throws). Valid until the next reconfigure(), which builds a new one.
    [[nodiscard]] layout_type& parts() { return active(); }
    [[nodiscard]] const layout_type& parts() const { return active(); }

private:
    // reconfigure() and move_to_world(): the move over `target`; `after` becomes the world.
    elastic::switch_report switch_onto(Comm& target, Comm& after, const parallel_config& config,
                                       const reconfigure_options& how, std::span<const elastic::state_source> sources,
                                       std::optional<state_type> held, elastic::lost_state lost,
                                       prepared_layout* prepared = nullptr) {
        const auto start = std::chrono::steady_clock::now();
        engine_options next_options = options_;
        next_options.partition = how.partition;
        std::optional<elastic::layout> next;
        std::exception_ptr problem;
        try {
            require(how.staging_bytes >= sizeof(scalar), "staging_bytes", how.staging_bytes,
                    "must hold at least one element (" + std::to_string(sizeof(scalar)) + " bytes)");
            next.emplace(layout_type::layout_of(checked_world(target, config), model_, next_options));
            if (!held) check_state_fits_layout();
            if (prepared != nullptr) check_prepared(*prepared, target, next->describe());
        } catch (...) {
            problem = std::current_exception();
        }
        agree(target, problem, next ? next->describe() : std::string());

        const elastic::shared_scalars scalars = share_scalars(target, held ? &*held : nullptr);
        phase_seconds phases;
        phases.check = since(start);
        // Made ahead (prepare_layout) where it was for the layout the move starts in.
        const bool planned_ahead = prepared != nullptr && prepared->plan && prepared->plan_from == layout_->describe();
        const elastic::transition_plan plan = planned_ahead
                                                  ? std::move(*prepared->plan)
                                                  : elastic::plan_transition(*layout_, *next, target.size(), sources, lost);
        phases.plan = since(start) - phases.check;

        // Out of the current engine (which points into its communicators) before they go.
        // What the backend recorded of the old layout's actions (exec::cuda's CUDA graphs) reads
        // the old buffers: forgotten first, while a failed wait for its launches still leaves
        // the engine whole.
        if (core_) exec::forget_all_actions(core_->backend());
        state_type state;
        std::optional<Backend> backend;
        if (core_) {
            state = std::move(*core_).release_state();  // its runners, which use the backend, go first
            backend.emplace(std::move(core_->backend()));
            core_.reset();
        } else {
            backend = std::move(spare_backend_);
            spare_backend_.reset();
        }
        if (held) state = std::move(*held);
        active_.reset();
        // The new layout's buffers are made where the backend computes.
        const state_memory_scope memory(backend->state_memory());
        const double before_move = since(start);
        elastic::transfer_figures figures;
        // The state moves as host memory, point to point: over the world's host side
        // (comm/host_side.hpp), which a device communicator such as NCCL pairs with.
        state_type moved = elastic::move_state<scalar>(
            std::move(state), *layout_, *next, plan, comm::host_side(target), next_options.optimizer, scalars,
            {.staging_bytes = how.staging_bytes}, figures, prepared != nullptr ? &prepared->reserved : nullptr);
        phases.move = since(start) - before_move;
        // The old layout's freed buffers that the memory keeps for reuse (exec::cuda's pool)
        // have sizes the new layout may never ask for: back to the system before it grows.
        backend->state_memory().trim();
        const std::string from = layout_->describe();
        options_ = next_options;
        layout_ = std::move(next);
        const bool adopts_communicators = prepared != nullptr && prepared->communicators_made;
        // Where the ranks that stay are fewer than those the state moved among (a leave), the
        // stayers are `after`'s ranks, numbered as in `target`; a leaver's `after` is not.
        const bool stays = &after == &target || (target.rank() < after.size() && after.rank() == target.rank());
        world_ = &after;
        Comm* active = nullptr;
        if (stays) {
            require(layout_->ranks() <= after.size(), "communicator to stay on", after.size(),
                    "must hold the new layout's " + std::to_string(layout_->ranks()) + " ranks");
            // over the stayers only: spares among them too
            active = adopts_communicators ? adopt_active(*prepared) : activate(layout_->ranks());
        } else {
            active_.reset();
        }
        if (active != nullptr) {
            if (adopts_communicators)
                core_ = std::make_unique<layout_type>(*active, layout_->config(), model_, options_, std::move(moved),
                                                      std::move(*backend), std::move(*prepared->groups));
            else
                core_ = std::make_unique<layout_type>(*active, layout_->config(), model_, options_, std::move(moved),
                                                      std::move(*backend));
            core_->set_learning_rate(scalars.learning_rate);  // its optimizers start from the options' rate
        } else
            spare_backend_ = std::move(backend);
        phases.build = since(start) - before_move - phases.move;
        return report(target, from, plan, scalars, figures, how.staging_bytes, since(start), phases);
    }

    layout_type& active() {
        require_active();
        return *core_;
    }
    const layout_type& active() const {
        require_active();
        return *core_;
    }
    void require_active() const {
        if (!core_)
            throw error("rank " + std::to_string(world_->rank()) + " is a spare in the layout " + layout_->describe() +
                        ": it holds no stages until engine.reconfigure() brings it back (engine.is_spare())");
    }

    static const parallel_config& checked_world(const Comm& world, const parallel_config& config) {
        require(config.world_size() <= world.size(), "world_size", config.world_size(),
                "must be at most the ranks taking part, " + std::to_string(world.size()) +
                    " (the ranks beyond a layout's world size wait as spares)");
        return config;
    }

    // The communicator of the layout's ranks: the world itself when it uses every rank, else
    // a split of it (collective over the world); nullptr on a spare.
    Comm* activate(int world_size) {
        active_.reset();
        if (world_size == world_->size()) return world_;
        const bool in_layout = world_->rank() < world_size;
        active_.emplace(world_->split(in_layout ? 0 : 1, world_->rank()));
        return in_layout ? &*active_ : nullptr;
    }

    // activate(), with the communicator prepare_layout() split ahead.
    Comm* adopt_active(prepared_layout& prepared) {
        active_.reset();
        if (!prepared.active) return world_;
        active_.emplace(std::move(*prepared.active));
        return prepared.groups ? &*active_ : nullptr;
    }

    // Communicators made ahead must be for this move: the layout, the world and the rank.
    static void check_prepared(const prepared_layout& prepared, const Comm& target, const std::string& layout) {
        require(prepared.layout == layout && prepared.world_size == target.size() && prepared.rank == target.rank(),
                "prepared layout", prepared.layout + " at rank " + std::to_string(prepared.rank) + " of " +
                                       std::to_string(prepared.world_size),
                "must be prepare_layout()'s over this world for the layout moved to, " + layout + " at rank " +
                    std::to_string(target.rank()) + " of " + std::to_string(target.size()));
    }

    // Every rank's state must be what the current layout says it holds (the plan reads it
    // by that layout): stages, and optimizer state tensors of the right size or empty.
    void check_state_fits_layout() const {
        if (!core_) return;  // a spare holds nothing
        const auto holdings = layout_->holdings(world_->rank());
        const auto& state = core_->state();
        require(state.stages.size() == holdings.size(), "training state stages", state.stages.size(),
                "must be the " + std::to_string(holdings.size()) + " stages the current layout gives this rank");
        for (std::size_t i = 0; i < holdings.size(); ++i) {
            const auto& held = state.stages[i];
            const std::size_t expected = config().zero_stage() == 0 ? holdings[i].registry.total_size()
                                                                    : holdings[i].range.valid();
            for (const auto& view : held.optimizer.state_views())
                require(view.values.empty() || view.values.size() == expected,
                        "optimizer state " + std::string(view.name) + " of stage " + std::to_string(held.index),
                        view.values.size(), "must hold " + std::to_string(expected) + " elements or none");
        }
    }

    // Every rank learns whether all of them can switch, and to the same layout; if not, each
    // throws before anything moves (its own error where it found one).
    static void agree(Comm& world, const std::exception_ptr& problem, const std::string& description) {
        std::array<char, 1024> text{};
        if (world.rank() == 0) std::strncpy(text.data(), description.c_str(), text.size() - 1);
        world.broadcast(std::as_writable_bytes(std::span<char>(text)), 0);
        const std::string first(text.data());
        double votes[2] = {problem ? 1.0 : 0.0,
                           !problem && first != description.substr(0, text.size() - 1) ? 1.0 : 0.0};
        world.allreduce_sum(std::span<double>(votes));
        if (problem) std::rethrow_exception(problem);
        if (votes[0] > 0)
            throw error("layout switch refused: " + std::to_string(static_cast<int>(votes[0])) +
                        " rank(s) found the new layout invalid (their error names the parameter); nothing moved");
        if (votes[1] > 0)
            throw error("layout switch refused: the ranks asked for different layouts (rank 0: " + first +
                        "); every rank must call reconfigure() with the same config; nothing moved");
    }

    // The scalars of the training state, from the lowest rank of `world` that holds a stage
    // (world rank 0 of a layout always does; after a failure it may be a survivor holding only
    // a mirror), and which optimizer state tensors any rank keeps. `held`: the state this rank
    // moves instead of the engine's own.
    elastic::shared_scalars share_scalars(Comm& world, const state_type* held) {
        const state_type* mine = held != nullptr ? held : core_ ? &core_->state() : nullptr;
        const bool has_stage = mine != nullptr && !mine->stages.empty();
        // The lowest such rank, as the largest of (size - rank).
        std::vector<double> candidate(static_cast<std::size_t>(world.size()), 0.0);
        if (has_stage) candidate[static_cast<std::size_t>(world.rank())] = 1;
        world.allreduce_sum(std::span<double>(candidate));
        const auto first_holder = std::find_if(candidate.begin(), candidate.end(), [](double c) { return c > 0; });
        require(first_holder != candidate.end(), "training state", "none",
                "must be held by at least one rank taking part in a layout switch");
        const int root = static_cast<int>(first_holder - candidate.begin());
        struct packed {
            std::uint64_t step, samples, rng_seed, optimizer_steps;
            double learning_rate;
        } values{};
        if (world.rank() == root) {
            const auto& first = mine->stages.front().optimizer;
            values = {mine->progress.step, mine->progress.samples, mine->progress.rng_seed, first.step_count(),
                      first.lr()};
        }
        world.broadcast(std::as_writable_bytes(std::span<packed>(&values, 1)), root);
        const std::size_t kinds = optim::any_optimizer<scalar>(options_.optimizer).state_names().size();
        std::vector<double> kept(kinds, 0.0);
        if (mine != nullptr)
            for (const auto& stage : mine->stages) {
                const auto views = stage.optimizer.state_views();
                for (std::size_t k = 0; k < kinds && k < views.size(); ++k)
                    if (!views[k].values.empty()) kept[k] = 1;
            }
        world.allreduce_sum(std::span<double>(kept));
        elastic::shared_scalars out;
        out.progress = {values.step, values.samples, values.rng_seed};
        out.optimizer_steps = values.optimizer_steps;
        out.learning_rate = values.learning_rate;
        for (const double k : kept) out.kept_state_tensors.push_back(k > 0);
        return out;
    }

    // Seconds a switch spent in each phase on this rank.
    struct phase_seconds {
        double check = 0, plan = 0, move = 0, build = 0;
    };
    static double since(std::chrono::steady_clock::time_point start) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    // Every rank's figures, gathered: the busiest rank's memory and the slowest rank's time.
    elastic::switch_report report(Comm& over, const std::string& from, const elastic::transition_plan& plan,
                                  const elastic::shared_scalars& scalars, const elastic::transfer_figures& figures,
                                  std::size_t cap, double seconds, const phase_seconds& phases) {
        constexpr std::size_t fields = 11;
        const double mine[fields] = {static_cast<double>(figures.bytes_sent),
                                     static_cast<double>(figures.bytes_copied),
                                     static_cast<double>(figures.staging_peak_bytes),
                                     static_cast<double>(figures.memory_peak_bytes),
                                     static_cast<double>(figures.memory_bound_bytes(cap)),
                                     seconds,
                                     phases.check,
                                     phases.plan,
                                     phases.move,
                                     phases.build,
                                     static_cast<double>(figures.bytes_made_ahead)};
        std::vector<double> all(fields * static_cast<std::size_t>(over.size()));
        over.allgather(std::span<const double>(mine), std::span<double>(all));
        elastic::switch_report r;
        r.from = from;
        r.to = layout_->describe();
        r.staging_cap_bytes = cap;
        const std::size_t kept = static_cast<std::size_t>(
            std::count(scalars.kept_state_tensors.begin(), scalars.kept_state_tensors.end(), true));
        r.lower_bound_bytes = plan.lower_bound_bytes(sizeof(scalar), kept);
        double worst_excess = 0;
        for (int rank = 0; rank < over.size(); ++rank) {
            const double* f = all.data() + fields * static_cast<std::size_t>(rank);
            r.bytes_moved += static_cast<std::size_t>(f[0]);
            r.bytes_copied_locally += static_cast<std::size_t>(f[1]);
            r.staging_peak_bytes = std::max(r.staging_peak_bytes, static_cast<std::size_t>(f[2]));
            // The rank furthest over its bound, or else the one that held the most.
            const double excess = f[3] - f[4];
            if (rank == 0 || excess > worst_excess ||
                (worst_excess <= 0 && excess <= 0 && f[3] > r.memory_peak_bytes)) {
                worst_excess = std::max(worst_excess, excess);
                r.memory_peak_bytes = static_cast<std::size_t>(f[3]);
                r.memory_bound_bytes = static_cast<std::size_t>(f[4]);
            }
            r.within_memory_bound = r.within_memory_bound && f[3] <= f[4];
            r.seconds = std::max(r.seconds, f[5]);
            r.check_seconds = std::max(r.check_seconds, f[6]);
            r.plan_seconds = std::max(r.plan_seconds, f[7]);
            r.move_seconds = std::max(r.move_seconds, f[8]);
            r.build_seconds = std::max(r.build_seconds, f[9]);
            r.bytes_made_ahead += static_cast<std::size_t>(f[10]);
        }
        return r;
    }

    Comm* world_;
    model_config model_;
    engine_options options_;
    std::optional<elastic::layout> layout_;  // the current layout, as every rank sees it
    std::optional<Comm> active_;             // the layout's ranks, when it does not use them all
    std::unique_ptr<layout_type> core_;      // the current layout's engine; none on a spare
    std::optional<Backend> spare_backend_;   // a spare keeps its backend for when it comes back
};

}  // namespace weft::train

namespace weft {
// The composition reads like a sentence:
//   weft::engine<weft::sched::one_f_one_b, weft::shard::replicate, weft::comm::mpi, weft::exec::cpu>
template <class Schedules, class Sharding, class Comm, class Backend, class Model = models::mlp>
using engine = train::engine<Schedules, Sharding, Comm, Backend, Model>;
}  // namespace weft
