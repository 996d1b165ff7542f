// The engine in one fixed layout: the composition of a rank's training state
// (shard/training_state.hpp), one stage runner per stage it holds (train/stage_runner.hpp),
// the stages' sharding (shard::stage_sharding, chosen by the Sharding policy), and the
// program loop that runs the lowered schedule over them (train/program_loop.hpp), as a
// CUTLASS kernel is a mainloop, an epilogue and a tile scheduler. A step runs the program,
// sums tied gradients, finishes the data-parallel reductions and steps the optimizers on
// what the sharding gives this rank; everything else is the parts' job. weft::engine
// (train/engine.hpp) holds one of these and builds another when the layout switches.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/process_grid.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/models/mlp.hpp"
#include "weft/models/pipeline_model.hpp"
#include "weft/models/stage_units.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/nn/layer_residency.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/tensor_parallel.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/optim/sgd_update.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/forward_only.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/sched/shard_actions.hpp"
#include "weft/sched/validate.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/training_state.hpp"
#include "weft/train/engine_options.hpp"
#include "weft/train/finite_guard.hpp"
#include "weft/train/grad_norm.hpp"
#include "weft/train/layout_groups.hpp"
#include "weft/train/program_loop.hpp"
#include "weft/train/simulated_bubble.hpp"
#include "weft/train/stage_runner.hpp"
#include "weft/train/step_log.hpp"
#include "weft/train/tied_gradients.hpp"

namespace weft::train {
template <class Schedules, class Sharding, class Comm, class Backend, class Model>
class layout_engine {

public:
    using schedules = sched::any_of_t<Schedules>;
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;
    using model_type = Model;
    using model_config = typename Model::config;
    using batch_type = typename Model::batch;
    using stage_type = typename Model::template stage<Backend>;
    using runner_type = stage_runner<Model, Backend>;
    using sharding_type = shard::stage_sharding<Sharding, scalar, Comm>;
    using state_type = shard::training_state<scalar>;
    using groups_type = layout_groups<scalar, Comm>;
    // A model whose stages take a tensor-parallel group (GPT) runs with tp > 1.
    static constexpr bool tensor_parallel_model = models::tensor_parallel_stages<Model, Backend>;

    // Collective over `world`: every rank constructs its engine with the same arguments. The
    // schedule is config.schedule(), or the set's first when none is chosen (config() then
    // reports that one), generated for (pp, microbatches, chunks); training starts from the
    // model's initial weights.
    layout_engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
                  Backend backend = Backend{})
        : layout_engine(world, with_schedule_chosen(config), model, options, std::nullopt, std::nullopt,
                        std::move(backend), std::nullopt) {}

    // Runs a given compute-only program (e.g. one read from PyTorch's CSV) instead of
    // generating one; it must be for config.pp() ranks and config.microbatches().
    layout_engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
                  const sched::program& compute_only, Backend backend = Backend{})
        : layout_engine(world, config, model, options, compute_only, std::nullopt, std::move(backend),
                        std::nullopt) {}

    // Continues from `state` (another engine's release_state(), or one a layout switch built):
    // it must hold this rank's stages of this layout, with tensors of their layouts and the
    // optimizer `options` names; its progress carries on. Checked before anything runs.
    layout_engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
                  state_type state, Backend backend = Backend{})
        : layout_engine(world, with_schedule_chosen(config), model, options, std::nullopt, std::move(state),
                        std::move(backend), std::nullopt) {}

    // As above, over `groups` that make_groups() made ahead for this layout over `world`: the
    // engine adopts them and splits nothing, so that building it is not collective.
    layout_engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
                  state_type state, Backend backend, groups_type groups)
        : layout_engine(world, with_schedule_chosen(config), model, options, std::nullopt, std::move(state),
                        std::move(backend), std::move(groups)) {}

    // The communicators of the layout `requested` gives (with options.partition) over
    // `world`, made ahead of the engine that adopts them (the constructor above). Collective
    // over `world`, the layout's ranks (world.size() == its world size), every rank with the
    // same arguments. Checked as the constructor checks the layout. For communicators whose
    // work is ordered on the host: one that joins the backend's compute stream (comm::nccl)
    // must be split after the engine has set it (the constructors without groups).
    [[nodiscard]] static groups_type make_groups(Comm& world, const parallel_config& requested,
                                                 const model_config& model, const engine_options& options) {
        static_assert(!joins_compute_stream,
                      "weft: groups made ahead would not order their work after the backend's compute stream");
        const parallel_config config = checked_config(with_schedule_chosen(requested), model, options);
        const sched::program program = lowered_program(generate(config), config, model, options);
        comm::process_grid<Comm> grid(world, config);
        std::vector<Comm> extra =
            more_channels(grid.pipeline(), program_loop<Model, Backend, Comm>::own_routes(program).count);
        tied_gradients<scalar, Comm> ties(Model::tied_parameters(model),
                                          stage_units_of(model, options, program.num_stages), program.stage_rank,
                                          grid.pipeline());
        return groups_type{std::move(grid), std::move(extra), std::move(ties)};
    }

    // Runners and shardings point into the engine's own state and groups.
    layout_engine(const layout_engine&) = delete;
    layout_engine& operator=(const layout_engine&) = delete;
    layout_engine(layout_engine&&) = delete;
    layout_engine& operator=(layout_engine&&) = delete;
    ~layout_engine() = default;

    // Runs one training step on the global batch (every rank passes the same batch)
    // and returns what the step log prints. Collective over the world.
    step_stats step(const batch_type& batch) {
        require_runnable(batch, "go on training");
        // What the step makes (an optimizer's moments on its first step) lives with the rest.
        const state_memory_scope memory(backend_.state_memory());
        const auto start = std::chrono::steady_clock::now();
        for (auto& [index, sharding] : shardings_) sharding.begin_step();
        sharding_actions actions{this};
        last_program_ =
            loop_.run(batch, replica_first_row(), runners_, std::span<Comm* const>(channels_), actions);
        // Everything below reads the gradients on the host: the backend's queued work first.
        backend_.synchronize();
        // Tied copies are summed before their stages' data-parallel reduction (which their
        // REDUCE_GRAD deferred to here); the other stages' reductions are in flight already.
        // What this rank waits here is the reduction time the program did not hide.
        const auto program_end = std::chrono::steady_clock::now();
        ties_.sum([this](int s) -> nn::flat_parameters<scalar>& { return state_.stage(s).tensors.full; });
        for (auto& [index, sharding] : shardings_) finish_reduce(sharding);
        const double exposed_reduce_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - program_end).count();

        // One reduction carries the loss, every rank's idle fraction of the program, its part
        // of the squared global gradient norm, its exposed reduction time and, per stage, whether its reduced gradients
        // are finite; it comes before the update, so that a non-finite step is not applied
        // and clipping knows the norm. Every rank reports the same loss (loss_contribution).
        const int stages = loop_.program().num_stages;
        constexpr std::size_t first_flag = 4;
        const std::size_t first_cost = first_flag + static_cast<std::size_t>(stages);
        std::vector<double> totals(first_cost + kinds_timed * static_cast<std::size_t>(config_.pp()), 0.0);
        totals[0] = loss_contribution(last_program_);
        totals[1] = idle_fraction();
        totals[3] = exposed_reduce_seconds;
        add_compute_costs(std::span<double>(totals).subspan(first_cost));
        for (const auto& [index, sharding] : shardings_) {
            // Replicas of plain data parallelism hold the same gradients: replica 0 counts them.
            const bool counts = sharding.zero_stage() != 0 || coordinates().dp_index == 0;
            const std::size_t offset = sharding.zero_stage() == 0 ? 0 : sharding.shard().offset;
            const auto summary = summarize_gradients(sharding.owned_gradients(), offset,
                                                     counts ? std::span<const flat_run>(find(norm_runs_, index))
                                                            : std::span<const flat_run>());
            if (!summary.finite) totals[first_flag + static_cast<std::size_t>(index)] = 1;
            totals[2] += summary.sum_of_squares;
        }
        world_->allreduce_sum(std::span<double>(totals));
        const auto stage_flags = std::span<const double>(totals).subspan(first_flag, static_cast<std::size_t>(stages));
        const int nonfinite_stage = first_nonfinite_stage(stage_flags, std::isfinite(totals[0]));
        const double grad_norm = std::sqrt(totals[2]);
        const auto clip = static_cast<scalar>(clip_coefficient(options_.grad_clip, grad_norm));

        for (auto& [index, sharding] : shardings_) {
            auto& stage = state_.stage(index);
            // A non-finite step still runs each sharding's step (its collectives and the reset
            // of the gradients), without the update.
            sharding.step([&](std::span<scalar> params, std::span<const scalar> grads, std::size_t offset) {
                if (nonfinite_stage >= 0) return;
                optimizer_step(stage.optimizer, params, grads, stage.tensors.registry(), offset, clip);
            });
        }
        // The step returns with its updates and the collectives after them (ZeRO's parameter
        // gather) complete, so the host may read the state (a checkpoint, weight inspection).
        backend_.synchronize();
        // The batch was used either way: a skipped step still moves the data on.
        const long long step_index = static_cast<long long>(state_.progress.step);
        ++state_.progress.step;
        state_.progress.samples += static_cast<std::uint64_t>(options_.batch_size);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return {.step = step_index, .loss = totals[0], .milliseconds = 1e3 * seconds,
                .samples_per_second = options_.batch_size / seconds, .bubble = totals[1] / world_->size(),
                .simulated_bubble = simulated_bubble(loop_.program(), std::span<const double>(totals).subspan(first_cost)),
                .grad_norm = grad_norm, .exposed_reduce_ms = 1e3 * totals[3] / world_->size(),
                .nonfinite_stage = nonfinite_stage};
    }

    // The model's mean loss on `batch` without training it (a validation loss): the
    // schedule's forwards only, no gradients, no update, the progress unchanged. Collective
    // over the world, like step(); every rank returns the same loss.
    double evaluate(const batch_type& batch) {
        require_runnable(batch, "evaluate");
        if (!eval_loop_) {
            // Built on first use: a run that never evaluates pays nothing.
            const sched::shard_action_options shard_actions{
                .reduce_grad = false, .unshard = config_.zero_stage() == 3, .prefetch = options_.unshard_prefetch};
            // On the training program's channels: its forwards' routes are among them.
            eval_loop_.emplace(
                sched::add_shard_actions(sched::forward_only(loop_.program()), shard_actions),
                grid_.coordinates().pp_index, model_, rows_per_microbatch_, options_.recv_lookahead, loop_.routes());
        }
        sharding_actions actions{this};
        const program_report report =
            eval_loop_->run(batch, replica_first_row(), runners_, std::span<Comm* const>(channels_), actions);
        double loss[1] = {loss_contribution(report)};
        world_->allreduce_sum(std::span<double>(loss));
        return loss[0];
    }

    // The ownership map of the layout `requested` gives (with options.partition) over the
    // virtual parameter space, checked as the constructor checks it: a layout that cannot
    // run is a weft::error naming the parameter. Not collective; nothing is built.
    [[nodiscard]] static elastic::layout layout_of(const parallel_config& requested, const model_config& model,
                                                   const engine_options& options) {
        const parallel_config config = checked_config(with_schedule_chosen(requested), model, options);
        const sched::program program = lowered_program(generate(config), config, model, options);
        return elastic::layout(
            config, program.stage_rank, stage_units_of(model, options, program.num_stages),
            [&](int, nn::unit_range stage_units, int tp_rank) {
                if constexpr (tensor_parallel_model)
                    return stage_type::layout(model, stage_units, tp_rank, config.tp());
                else
                    return stage_type::layout(model, stage_units);
            },
            options.partition);
    }

    // This engine's layout over the virtual parameter space (its program's stage placement,
    // which a given compute-only program may choose).
    [[nodiscard]] elastic::layout current_layout() const {
        return elastic::layout(
            config_, loop_.program().stage_rank, units_,
            [this](int stage, nn::unit_range, int tp_rank) { return stage_layout(stage, tp_rank); },
            options_.partition);
    }

    // ---- the parts -------------------------------------------------------------------
    [[nodiscard]] const state_type& state() const { return state_; }
    // Hands the training state over (to rebuild an engine around it, e.g. in another layout);
    // this engine must not step again.
    [[nodiscard]] state_type release_state() && {
        runners_.clear();
        shardings_.clear();
        norm_runs_.clear();
        tied_ranges_.clear();
        released_ = true;
        return std::move(state_);
    }
    [[nodiscard]] const shard::training_progress& progress() const { return state_.progress; }
    // The learning rate of the next steps, on every local stage's optimizer (a schedule such
    // as train::lr_schedule sets it before each step, from progress().step).
    void set_learning_rate(double lr) {
        for (auto& stage : state_.stages) stage.optimizer.set_lr(lr);
    }
    // For checkpoints: a loaded run continues from the saved step and data position.
    void set_progress(const shard::training_progress& progress) { state_.progress = progress; }
    [[nodiscard]] Backend& backend() { return backend_; }
    [[nodiscard]] const sched::program& program() const { return loop_.program(); }
    [[nodiscard]] const parallel_config& config() const { return config_; }
    [[nodiscard]] const engine_options& options() const { return options_; }
    [[nodiscard]] const model_config& model() const { return model_; }
    [[nodiscard]] int pipeline_rank() const { return coordinates().pp_index; }
    [[nodiscard]] const comm::grid_coordinates& coordinates() const { return grid_.coordinates(); }
    // The ranks holding the stages of this rank's replica; pipeline rank i is rank i here.
    [[nodiscard]] Comm& pipeline_group() { return grid_.pipeline(); }
    [[nodiscard]] Comm& data_group() { return grid_.data(); }
    // The ranks holding the other tensor-parallel slices of this rank's stages.
    [[nodiscard]] Comm& tensor_group() { return grid_.tensor(); }

    // ---- stages ----------------------------------------------------------------------
    // The stages this rank runs, by global stage index.
    [[nodiscard]] std::vector<int> local_stages() const { return state_.stage_indices(); }
    [[nodiscard]] const stage_type& stage(int index) const { return find(runners_, index).stage(); }
    [[nodiscard]] optim::any_optimizer<scalar>& stage_optimizer(int index) { return state_.stage(index).optimizer; }
    [[nodiscard]] const optim::any_optimizer<scalar>& stage_optimizer(int index) const {
        return state_.stage(index).optimizer;
    }
    [[nodiscard]] const sharding_type& stage_sharding(int index) const { return find(shardings_, index); }
    // The model units each stage holds, by global stage index.
    [[nodiscard]] const std::vector<nn::unit_range>& stage_units() const { return units_; }
    // The parameter layout of stage `index` on tensor-parallel rank `tp_rank` (any rank's,
    // without building it): what checkpoints assemble slices with.
    [[nodiscard]] weft::parameter_registry stage_layout(int index, int tp_rank) const {
        const auto units = units_.at(static_cast<std::size_t>(index));
        if constexpr (tensor_parallel_model) return stage_type::layout(model_, units, tp_rank, config_.tp());
        else return stage_type::layout(model_, units);
    }

    // Runs fn(stage_index, stage) for every local stage with its full parameters present:
    // under ZeRO-3 they are all-gathered for the call and released after. Collective over
    // the data-parallel group (checkpoints and weight inspection use it).
    template <class Fn>
    void with_full_parameters(Fn&& fn) {
        for (auto& [index, sharding] : shardings_)
            sharding.with_full_parameters([&] { fn(index, std::as_const(find(runners_, index)).stage()); });
    }
    // Runs fn(tensors) to write all of stage `index`'s parameters (a loaded checkpoint) and
    // keeps what this rank holds of them; not collective.
    template <class Fn>
    void overwrite_parameters(int index, Fn&& fn) {
        auto& tensors = state_.stage(index).tensors.full;
        find(shardings_, index).overwrite_parameters([&] { fn(tensors); });
    }

    // ---- what the last step did ------------------------------------------------------
    // This rank's idle share of the last step's program: the time it spent waiting for data
    // or for its sends, over the program's wall time. The step log's bubble is the mean of
    // this over all ranks.
    [[nodiscard]] double idle_fraction() const {
        return last_program_.program_seconds > 0 ? 1.0 - last_program_.compute_seconds / last_program_.program_seconds
                                                 : 0.0;
    }
    // Most micro-batches whose activations this rank held at once during the last step.
    [[nodiscard]] std::size_t peak_stashed() const { return last_program_.peak_stashed; }

    // What this rank holds for its stages (see memory_report).
    [[nodiscard]] memory_report memory() const {
        memory_report report;
        for (const auto& [index, sharding] : shardings_) {
            auto now = sharding.held_now();
            now.optimizer_state = state_.stage(index).optimizer.state_elements() * sizeof(scalar);
            report.between_steps = report.between_steps + now;
            auto peak = sharding.peak();
            peak.optimizer_state = now.optimizer_state;
            report.peak = report.peak + peak;
            report.traffic = report.traffic + sharding.traffic();
        }
        report.peak_activations = last_program_.peak_activation_bytes;
        return report;
    }

private:
    // The program's stage-wide actions, as the sharding policy carries them out.
    struct sharding_actions {
        layout_engine* self;
        // A stage holding a tied tensor first needs the other copies' gradients (summed after
        // the program); its reduction starts then.
        // A reduction or a gather reads the stage's buffers after the backend's queued work on
        // them (a GPU backend's kernels may still be adding gradients): a communicator that
        // joins the backend's stream orders itself after that work, so the host goes on
        // queueing actions; any other reads the buffers from the host, after a wait.
        void reduce_grad(int s) {
            if (self->ties_.holds(s)) return;
            if constexpr (!joins_compute_stream) self->backend_.synchronize();
            find(self->shardings_, s).start_reduce();
        }
        // A micro-batch's backward has added all it adds to a layer's gradients (`last`: the
        // stage's last backward of the step, so they are final). ZeRO-2/3 per micro-batch start
        // reducing them now, every micro-batch; plain data parallelism starts on the final
        // ones; tied copies wait for sum() after the program, and ZeRO per step for
        // REDUCE_GRAD (its reduce-scatter takes the whole buffer).
        void gradients_final(int s, nn::gradient_range range, bool last) {
            auto& sharding = find(self->shardings_, s);
            const bool overlapped = last && self->options_.overlap_reduce && sharding.zero_stage() == 0 &&
                                    self->config_.dp() > 1;
            if (!sharding.reduces_per_microbatch() && !overlapped) return;
            if constexpr (!joins_compute_stream) self->backend_.synchronize();
            for (const nn::gradient_range part : nn::ranges_outside(range, find(self->tied_ranges_, s)))
                sharding.start_reduce_range(part);
        }
        void unshard(int s) {
            if constexpr (!joins_compute_stream) self->backend_.synchronize();
            find(self->shardings_, s).start_unshard();
        }
        // Frees the full parameters, which kernels still queued may read: a state memory that
        // frees after queued work (exec::cuda's fences the buffer) takes them as they are;
        // otherwise the host waits for the backend first.
        void reshard(int s) {
            if (!self->backend_.state_memory().frees_after_queued_work) self->backend_.synchronize();
            find(self->shardings_, s).reshard();
        }
        void before_compute(int s) { find(self->shardings_, s).finish_unshard(); }
    };

    layout_engine(Comm& world, const parallel_config& config, const model_config& model, const engine_options& options,
                  const std::optional<sched::program>& compute_only, std::optional<state_type> state, Backend backend,
                  std::optional<groups_type> made_ahead)
        : backend_(std::move(backend)),
          world_(&world),
          config_(checked_config(config, model, options)),
          model_(model),
          options_(options),
          rows_per_microbatch_(options.batch_size / config.dp() / config.microbatches()),
          grid_(grid_over(world, config, made_ahead)),
          loop_(lowered_program(compute_only ? *compute_only : generate(config), config, model, options),
                grid_.coordinates().pp_index, model, rows_per_microbatch_, options.recv_lookahead),
          extra_channels_(made_ahead ? std::move(made_ahead->extra_channels)
                                     : more_channels(grid_.pipeline(), loop_.channel_count())),
          channels_(channel_pointers(grid_.pipeline(), extra_channels_)),
          units_(stage_units_of(model, options, loop_.program().num_stages)),
          state_(in_state_memory([&] { return state ? adopted(std::move(*state)) : initial_state(); })),
          ties_(made_ahead ? std::move(made_ahead->ties)
                           : tied_gradients<scalar, Comm>(Model::tied_parameters(model), units_,
                                                          loop_.program().stage_rank, grid_.pipeline())) {
        if (made_ahead) check_made_ahead();
        const state_memory_scope memory(backend_.state_memory());  // what the shardings make
        for (auto& stage : state_.stages) {
            auto& tensors = stage.tensors;
            tied_ranges_.try_emplace(stage.index, ties_.ranges_of(stage.index, tensors.registry()));
            // Brings whole tensors into the policy's between-steps form (or checks an adopted
            // state is in it) before a runner reads them.
            shardings_.try_emplace(stage.index, tensors, grid_.data(),
                                   shard::sharding_options{.zero_stage = config_.zero_stage(),
                                                           .bucket_elements = options.bucket_elements,
                                                           .reduce = options.zero_reduce,
                                                           .reduced_after_program = find(tied_ranges_, stage.index)});
            const recompute_mode recompute = recompute_of(options.recompute, stage.index);
            if constexpr (tensor_parallel_model)
                runners_.try_emplace(stage.index, stage.index, backend_, model_, stage.units, tensors.full,
                                     nn::make_tp_group<scalar>(grid_.tensor()), recompute);
            else
                runners_.try_emplace(stage.index, stage.index, backend_, model_, stage.units, tensors.full, recompute);
            norm_runs_.try_emplace(stage.index,
                                   norm_counted_runs(tensors.registry(), stage.index, coordinates().tp_index,
                                                     Model::tied_parameters(model_), units_));
        }
    }

    // The process grid: made ahead, or split from `world` once it is ordered after the backend.
    comm::process_grid<Comm> grid_over(Comm& world, const parallel_config& config,
                                       std::optional<groups_type>& made_ahead) {
        Comm& ordered = ordered_after_backend(world);
        if (made_ahead) return std::move(made_ahead->grid);
        return comm::process_grid<Comm>(ordered, config);
    }

    // Groups made ahead must be this layout's at this rank (weft::engine checks the layout they
    // were made for before any state moves; this catches a caller that did not).
    void check_made_ahead() {
        const comm::grid_coordinates expected = comm::grid_coordinates_of(world_->rank(), config_);
        const comm::grid_coordinates& got = grid_.coordinates();
        const bool fits = got.pp_index == expected.pp_index && got.dp_index == expected.dp_index &&
                          got.tp_index == expected.tp_index && grid_.pipeline().size() == config_.pp() &&
                          grid_.data().size() == config_.dp() && grid_.tensor().size() == config_.tp() &&
                          extra_channels_.size() + 1 == static_cast<std::size_t>(loop_.channel_count());
        require(fits, "groups made ahead", "of another layout or rank",
                "must be make_groups()'s for this layout at rank " + std::to_string(world_->rank()));
    }

    // The pipeline's channels beyond the pipeline group itself (program_loop): one split of
    // it each, made by every pipeline rank alike (the count is the program's, the same on all).
    static std::vector<Comm> more_channels(Comm& pipeline, int count) {
        std::vector<Comm> extra;
        for (int c = 1; c < count; ++c) extra.push_back(pipeline.split(0, pipeline.rank()));
        return extra;
    }
    static std::vector<Comm*> channel_pointers(Comm& pipeline, std::vector<Comm>& extra) {
        std::vector<Comm*> out{&pipeline};
        for (Comm& c : extra) out.push_back(&c);
        return out;
    }

    // Whether Comm takes the backend's compute stream (comm::nccl): ordered_after_backend
    // then sets it, and every operation the communicator starts reads its inputs after the
    // kernels queued before it, without the host waiting for them.
    static constexpr bool joins_compute_stream =
        requires(Comm& c, Backend& b) { c.set_compute_stream(b.stream()); };

    // A communicator whose waits are stream-ordered (comm::nccl) is set to order its work
    // after the backend's compute stream, and its waits before the kernels queued next; the
    // grid's groups, split from it, inherit that. The caller's communicator keeps the setting.
    // A backend with limited_waits (exec::cuda) takes the communicator's timeout as it is now.
    Comm& ordered_after_backend(Comm& world) {
        if constexpr (joins_compute_stream) world.set_compute_stream(backend_.stream());
        // The backend's waits for its queued work give up when the communicator's would: over
        // a stream-ordered communicator, that work may wait for a message that never comes.
        if constexpr (exec::limited_waits<Backend> && requires(Comm& c) { c.timeout(); })
            backend_.set_wait_limit(world.timeout(), world.rank());
        return world;
    }

    // make(), with the state buffers it makes in the backend's state memory.
    template <class Make>
    [[nodiscard]] state_type in_state_memory(Make&& make) const {
        const state_memory_scope memory(backend_.state_memory());
        return std::forward<Make>(make)();
    }

    // A stage's end of REDUCE_GRAD: the averaging by the backend's kernel where it has one
    // (exec::optimizer_kernels) and the sharding takes it, after waits that order the kernel
    // behind the reduction; completed and averaged on the host otherwise.
    template <class StageSharding>
    void finish_reduce(StageSharding& sharding) {
        if constexpr (exec::optimizer_kernels<Backend>) {
            const auto scale = [this](std::span<scalar> values, scalar factor) { backend_.scale(values, factor); };
            if constexpr (requires { sharding.finish_reduce(scale); }) {
                sharding.finish_reduce(scale);
                return;
            }
        }
        sharding.finish_reduce();
    }

    // The step's summary of a stage's reduced gradients (owned: the flat buffer's elements
    // from offset on): by the backend's kernel where it has one (exec::optimizer_kernels),
    // on the host otherwise.
    [[nodiscard]] optim::gradient_summary summarize_gradients(std::span<const scalar> owned, std::size_t offset,
                                                              std::span<const flat_run> counted) {
        if constexpr (exec::optimizer_kernels<Backend>)
            return backend_.summarize_gradients(owned, offset, counted);
        else
            return optim::summarize_gradients_on_host(owned, offset, counted);
    }

    // The optimizer's update, gradients scaled by `grad_scale` (clipping): AdamW's or SGD's
    // ranges by the backend's kernels where it has them, stream-ordered after the averaging
    // kernel, and finished before the sharding's collectives and the reset of the gradients
    // touch the buffers from the host.
    void optimizer_step(optim::any_optimizer<scalar>& optimizer, std::span<scalar> params,
                        std::span<const scalar> grads, const weft::parameter_registry& registry, std::size_t offset,
                        scalar grad_scale) {
        if constexpr (exec::optimizer_kernels<Backend>) {
            optimizer.step(
                params, grads, registry, offset, grad_scale,
                [this](std::span<scalar> p, std::span<const scalar> g, std::span<scalar> m, std::span<scalar> v,
                       const optim::adamw_factors<scalar>& f,
                       bool decays) { backend_.adamw_update(p, g, m, v, f, decays); },
                [this](std::span<scalar> p, std::span<const scalar> g, std::span<scalar> momentum_buffer,
                       const optim::sgd_factors<scalar>& f,
                       bool decays) { backend_.sgd_update(p, g, momentum_buffer, f, decays); });
            backend_.synchronize();
        } else {
            optimizer.step(params, grads, registry, offset, grad_scale);
        }
    }

    static parallel_config checked_config(const parallel_config& config, const model_config& model,
                                          const engine_options& options) {
        if constexpr (!tensor_parallel_model)
            require(config.tp() == 1, "tp", config.tp(), "this model has no tensor-parallel layers; valid: 1");
        require(Sharding::zero_stage < 0 || config.zero_stage() == Sharding::zero_stage, "zero_stage",
                config.zero_stage(),
                std::string("this engine was compiled with sharding ") + std::string(Sharding::name) +
                    ", which is ZeRO stage " + std::to_string(Sharding::zero_stage) +
                    " (shard::any_zero takes the config's stage)");
        Model::validate(model);
        require(options.batch_size >= 1 && options.batch_size % (config.dp() * config.microbatches()) == 0,
                "batch_size", options.batch_size,
                "must be a positive multiple of dp*microbatches = " +
                    std::to_string(config.dp() * config.microbatches()));
        require(std::isfinite(options.grad_clip) && options.grad_clip >= 0, "grad_clip", options.grad_clip,
                "must be a finite number >= 0 (0: no clipping)");
        if (options.zero_reduce == shard::zero_reduce::microbatch) {
            require(!exec::records_actions<Backend>, "zero_reduce", "microbatch",
                    "needs a backend that runs each action as it is called; this one records actions and replays them "
                    "(CUDA graphs), which would not report each layer's gradients nor ask for its parameters; valid "
                    "here: step");
            require(config.zero_stage() != 3 || nn::names_layer_reads<stage_type>, "zero_reduce", "microbatch",
                    "with ZeRO-3 needs a model whose stages name the layers they read (nn/layer_residency.hpp); "
                    "valid for this model: step, or ZeRO-2");
        }
        return config;
    }

    // The config with its schedule filled in, checked again against that schedule's layout.
    static parallel_config with_schedule_chosen(const parallel_config& config) {
        if (config.schedule().chosen()) return config;
        parallel_options options = config.options();
        options.schedule = schedules::default_kind();
        return parallel_config(options);
    }

    static sched::program generate(const parallel_config& config) {
        return schedules::generate(config.schedule(),
                                   sched::schedule_params{.ranks = config.pp(), .microbatches = config.microbatches(),
                                                          .chunks = config.chunks()});
    }

    // The compute-only program with its communication and sharding actions, checked.
    static sched::program lowered_program(const sched::program& compute_only, const parallel_config& config,
                                          const model_config& model, const engine_options& options) {
        require(compute_only.num_ranks == config.pp(), "program ranks", compute_only.num_ranks,
                "must equal pp = " + std::to_string(config.pp()));
        require(compute_only.num_microbatches == config.microbatches(), "program microbatches",
                compute_only.num_microbatches, "must equal microbatches = " + std::to_string(config.microbatches()));
        check_recompute(options.recompute, compute_only.num_stages);
        const int num_units = Model::num_units(model);
        require(num_units >= compute_only.num_stages, "stages", compute_only.num_stages,
                "the model has " + std::to_string(num_units) +
                    " units (layers + 2) to give to stages; use fewer stages or more layers");
        const sched::shard_action_options shard_actions{
            .reduce_grad = true, .unshard = config.zero_stage() == 3, .prefetch = options.unshard_prefetch};
        sched::program lowered = sched::add_shard_actions(sched::lower(compute_only), shard_actions);
        if (const auto verdict = sched::check(lowered); !verdict.ok)
            throw error("the lowered program is invalid: " + verdict.message);
        if (const auto verdict = sched::check_shard_actions(lowered, shard_actions); !verdict.ok)
            throw error("the lowered program's sharding actions are invalid: " + verdict.message);
        return lowered;
    }

    // The units of each of `stages` stages: options.partition's counts, or the default.
    static std::vector<nn::unit_range> stage_units_of(const model_config& model, const engine_options& options,
                                                      int stages) {
        return models::stage_units<Model>(model, stages, options.partition);
    }

    // This rank's stages under the program's placement, in stage order.
    [[nodiscard]] std::vector<shard::stage_placement> placements() const {
        std::vector<shard::stage_placement> out;
        const auto& program = loop_.program();
        for (int s = 0; s < program.num_stages; ++s)
            if (program.stage_rank[static_cast<std::size_t>(s)] == pipeline_rank())
                out.push_back({s, units_[static_cast<std::size_t>(s)]});
        return out;
    }

    [[nodiscard]] state_type initial_state() const {
        const auto stages = placements();
        std::uint64_t seed = 0;
        if constexpr (requires { model_.seed; }) seed = model_.seed;
        return shard::initial_training_state<Model, Backend>(model_, stages, coordinates().tp_index, config_.tp(),
                                                      options_.optimizer, seed);
    }

    // A state handed in must be this rank's stages of this layout; its optimizers take the
    // options' hyperparameters and keep their state.
    [[nodiscard]] state_type adopted(state_type state) const {
        const auto expected = placements();
        std::string expected_text, held_text;
        for (const auto& p : expected) expected_text += (expected_text.empty() ? "" : ", ") + std::to_string(p.index);
        for (const int s : state.stage_indices()) held_text += (held_text.empty() ? "" : ", ") + std::to_string(s);
        require(state.stage_indices().size() == expected.size(), "training state stages", "[" + held_text + "]",
                "must be this rank's stages [" + expected_text + "] in this layout");
        for (std::size_t i = 0; i < expected.size(); ++i) {
            auto& stage = state.stages[i];
            const auto& p = expected[i];
            require(stage.index == p.index, "training state stages", "[" + held_text + "]",
                    "must be this rank's stages [" + expected_text + "] in this layout");
            require(stage.units == p.units, "units of stage " + std::to_string(p.index),
                    "[" + std::to_string(stage.units.first) + ", " + std::to_string(stage.units.last) + ")",
                    "must be [" + std::to_string(p.units.first) + ", " + std::to_string(p.units.last) +
                        ") under this layout's partition");
            require(stage.tensors.registry() == stage_layout(p.index, coordinates().tp_index),
                    "tensors of stage " + std::to_string(p.index), "another layout",
                    "must be the stage's layout on tensor-parallel rank " + std::to_string(coordinates().tp_index) +
                        " of " + std::to_string(config_.tp()));
            require(stage.optimizer.kind() == options_.optimizer.kind, "optimizer of stage " + std::to_string(p.index),
                    stage.optimizer.name(), "must be " + std::string(optim::to_string(options_.optimizer.kind)) +
                                                " as engine_options::optimizer says");
            optim::any_optimizer<scalar> configured(options_.optimizer);
            configured.import_state(stage.optimizer.take_state());  // moved, not copied
            stage.optimizer = std::move(configured);
        }
        return state;
    }

    template <class Map>
    static auto& find(Map& map, int index) {
        const auto it = map.find(index);
        if (it == map.end()) throw invalid_argument("stage", index, "is not run by this rank");
        return it->second;
    }

    [[nodiscard]] bool owns_last_stage() const { return state_.holds(loop_.program().num_stages - 1); }

    // What step() and evaluate() need before they run a program: the training state, and a
    // global batch of the configured size.
    void require_runnable(const batch_type& batch, std::string_view to) const {
        require(!released_, "engine", "without its training state",
                "release_state() handed the state over; build an engine around it to " + std::string(to));
        require(Model::batch_rows(batch) == options_.batch_size, "batch rows", Model::batch_rows(batch),
                "must equal engine_options::batch_size = " + std::to_string(options_.batch_size));
    }
    // The global batch row this rank's data-parallel replica starts at.
    [[nodiscard]] int replica_first_row() const {
        return coordinates().dp_index * config_.microbatches() * rows_per_microbatch_;
    }
    // This rank's part of the global mean loss, for the sum over the world: last-stage ranks
    // give their replica's mean over dp, once per replica (tensor-parallel slices of it
    // compute the same loss).
    [[nodiscard]] double loss_contribution(const program_report& report) const {
        const bool reports_loss = owns_last_stage() && coordinates().tp_index == 0;
        return reports_loss ? report.loss_sum / config_.dp() : 0.0;
    }

    Backend backend_;
    Comm* world_;
    parallel_config config_;
    model_config model_;
    engine_options options_;
    int rows_per_microbatch_;
    comm::process_grid<Comm> grid_;
    program_loop<Model, Backend, Comm> loop_;
    std::vector<Comm> extra_channels_;  // the pipeline's channels after the first (grid_.pipeline())
    std::vector<Comm*> channels_;       // all of them, as loop_.run takes them
    std::vector<nn::unit_range> units_;  // per stage: the model units it holds
    state_type state_;
    tied_gradients<scalar, Comm> ties_;
    // Both point into state_ (and grid_, backend_): declared after them, destroyed before.
    std::map<int, sharding_type> shardings_;
    std::map<int, runner_type> runners_;
    std::map<int, std::vector<flat_run>> norm_runs_;  // per local stage: what it counts in the global norm
    std::map<int, std::vector<nn::gradient_range>> tied_ranges_;  // per local stage: its tied copies' gradients
    program_report last_program_;
    // This rank's compute seconds of the last program by kind, into its pipeline rank's slots of
    // `costs` (kinds_timed per pipeline rank), counted once per pipeline rank: by the rank at
    // data- and tensor-parallel index 0, whose replicas run the same program.
    void add_compute_costs(std::span<double> costs) const {
        const auto at = grid_.coordinates();
        if (at.dp_index != 0 || at.tp_index != 0) return;
        const auto slots = costs.subspan(kinds_timed * static_cast<std::size_t>(at.pp_index), kinds_timed);
        slots[std::size_t(timed_kind::forward)] = last_program_.forward_seconds;
        slots[std::size_t(timed_kind::backward)] = last_program_.backward_seconds;
        slots[std::size_t(timed_kind::backward_input)] = last_program_.backward_input_seconds;
        slots[std::size_t(timed_kind::backward_weight)] = last_program_.backward_weight_seconds;
    }
    std::optional<program_loop<Model, Backend, Comm>> eval_loop_;  // evaluate()'s forward-only program
    bool released_ = false;
};

}  // namespace weft::train

