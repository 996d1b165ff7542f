// The fused training loop. Each rank executes its row of the lowered schedule:
// RECVs are posted a few actions ahead, SENDs are non-blocking, F/B/I/W call the
// stage's forward, backward_input and backward_weight, and activations are stashed
// by (stage, micro-batch) and freed as soon as the schedule allows. REDUCE_GRAD starts
// a stage's data-parallel gradient reduction while later actions compute, UNSHARD and
// RESHARD gather and free a ZeRO-3 stage's parameters; after the program the optimizer
// steps on what the sharding policy gives this rank (shard/stage_state.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/process_grid.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/tensor_parallel.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/sched/shard_actions.hpp"
#include "weft/sched/validate.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_state.hpp"
#include "weft/train/activation_stash.hpp"
#include "weft/models/mlp.hpp"
#include "weft/models/pipeline_model.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/train/step_log.hpp"

namespace weft::train {

struct engine_options {
    int batch_size = 32;         // global batch: rows (samples, or sequences) per step over all replicas
    optim::optimizer_options optimizer{};
    int recv_lookahead = 4;      // how many actions ahead RECVs are posted
    // Elements per data-parallel all-reduce bucket (shard::replicate).
    std::size_t bucket_elements = shard::default_bucket_elements;
    // ZeRO-3: how many compute actions ahead of a stage's first use its UNSHARD starts.
    int unshard_prefetch = 1;
    // Units (layers) per stage, in stage order, e.g. {3, 4, 4, 3}; empty = balanced by the
    // model's cost per unit (Model::unit_costs, e.g. GPT's flops), or even in unit count.
    std::vector<int> partition{};
};

// What a rank holds for its stages: the training state between steps, its peak during a
// step (ZeRO-2/3 bring full buffers back for a while; optimizer state does not change
// size), and the most bytes of stashed activations at once during the last step.
struct memory_report {
    shard::memory_figures between_steps;
    shard::memory_figures peak;
    std::size_t peak_activations = 0;
};

// Stage unit ranges from a list of unit counts per stage; weft::error unless there is one
// positive count per stage and they add up to the model's units.
[[nodiscard]] inline std::vector<nn::unit_range> partition_from_counts(const std::vector<int>& counts, int num_units,
                                                                      int num_stages) {
    require(static_cast<int>(counts.size()) == num_stages, "partition size", counts.size(),
            "must list one unit count per stage (" + std::to_string(num_stages) + " stages)");
    std::vector<nn::unit_range> ranges;
    int first = 0;
    for (const int count : counts) {
        require(count >= 1, "partition entry", count, "every stage needs at least one unit");
        ranges.push_back({first, first + count});
        first += count;
    }
    require(first == num_units, "partition total", first,
            "the counts must add up to the model's " + std::to_string(num_units) + " units (layers + 2)");
    return ranges;
}

template <class Schedules, sharding Sharding, communicator Comm, compute_backend Backend, class Model = models::mlp>
class engine {
    static_assert(std::is_same_v<typename Backend::scalar, float> || std::is_same_v<typename Backend::scalar, double>,
                  "weft::engine: the backend's scalar must be float or double");
    static_assert(sizeof(models::require_pipeline_model<Model, Backend>) > 0);
    static_assert(accessible_from<typename Comm::memory_space, typename Backend::memory_space>,
                  "weft::engine: the communicator cannot reach the compute backend's memory (e.g. comm::nccl moves "
                  "device memory, exec::cpu computes in host memory); pair a host communicator (comm::local, "
                  "comm::mpi) with a host backend and comm::nccl with a device backend");
    static_assert(sizeof(sched::require_schedule_set<Schedules>) > 0);

public:
    using schedules = sched::any_of_t<Schedules>;
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;
    using model_config = typename Model::config;
    using batch_type = typename Model::batch;
    using stage_type = typename Model::template stage<Backend>;
    // A model whose stages take a tensor-parallel group (GPT) runs with tp > 1.
    static constexpr bool tensor_parallel_model =
        requires(Backend& b, const model_config& c, nn::unit_range u) { stage_type(b, c, u, nn::tp_group<scalar>{}); };

    // Collective over `world`: every rank constructs its engine with the same arguments.
    // The schedule is config.schedule(), or the set's first when none is chosen (config()
    // then reports that one), generated for (pp, microbatches, chunks).
    engine(Comm& world, const parallel_config& config, const model_config& model,
           const engine_options& options, Backend backend = Backend{})
        : engine(world, with_schedule_chosen(config), model, options,
                 generate_checked(with_schedule_chosen(config)), std::move(backend)) {}

    // Runs a given compute-only program (e.g. one read from PyTorch's CSV) instead of
    // generating one; it must be for config.pp() ranks and config.microbatches().
    engine(Comm& world, const parallel_config& config, const model_config& model,
           const engine_options& options, const sched::program& compute_only, Backend backend = Backend{})
        : backend_(std::make_unique<Backend>(std::move(backend))),
          world_(&world),
          config_(config),
          model_(model),
          options_(options),
          grid_(std::make_unique<comm::process_grid<Comm>>(world, config)) {
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
        rows_per_microbatch_ = options.batch_size / config.dp() / config.microbatches();
        require(compute_only.num_ranks == config.pp(), "program ranks", compute_only.num_ranks,
                "must equal pp = " + std::to_string(config.pp()));
        require(compute_only.num_microbatches == config.microbatches(), "program microbatches",
                compute_only.num_microbatches,
                "must equal microbatches = " + std::to_string(config.microbatches()));
        const int num_units = Model::num_units(model);
        require(num_units >= compute_only.num_stages, "stages", compute_only.num_stages,
                "the model has " + std::to_string(num_units) +
                    " units (layers + 2) to give to stages; use fewer stages or more layers");

        const sched::shard_action_options shard_actions{
            .reduce_grad = true, .unshard = config.zero_stage() == 3, .prefetch = options.unshard_prefetch};
        program_ = sched::add_shard_actions(sched::lower(compute_only), shard_actions);
        if (const auto verdict = sched::check(program_); !verdict.ok)
            throw error("the lowered program is invalid: " + verdict.message);
        if (const auto verdict = sched::check_shard_actions(program_, shard_actions); !verdict.ok)
            throw error("the lowered program's sharding actions are invalid: " + verdict.message);
        const int tag_space = 2 * program_.num_stages * program_.num_microbatches;
        require(tag_space <= max_tag + 1, "stages*microbatches", tag_space / 2,
                "message tags must fit in 0.." + std::to_string(max_tag));

        units_ = options.partition.empty() ? default_partition(model, num_units, program_.num_stages)
                                           : partition_from_counts(options.partition, num_units, program_.num_stages);
        for (int s = 0; s < program_.num_stages; ++s)
            if (program_.stage_rank[s] == pipeline_rank()) {
                auto& stage = stages_.emplace(s, local_stage{make_stage(units_[s]),
                                                             optim::any_optimizer<scalar>(options.optimizer), nullptr})
                                  .first->second;
                // The state points into the map node, which never moves.
                stage.sharding = std::make_unique<shard::stage_state<scalar, Comm>>(
                    stage.model.tensors(), grid_->data(), config.zero_stage(), options.bucket_elements);
            }
        tie_parameters();
    }

    // Runs one training step on the global batch (every rank passes the same batch)
    // and returns what the step log prints. Collective over the world.
    step_stats step(const batch_type& batch) {
        require(Model::batch_rows(batch) == options_.batch_size, "batch rows", Model::batch_rows(batch),
                "must equal engine_options::batch_size = " + std::to_string(options_.batch_size));
        const auto start = std::chrono::steady_clock::now();
        for (auto& [index, stage] : stages_) stage.sharding->begin_step();
        run_program(batch);
        // Tied copies are summed before their stages' data-parallel reduction (which their
        // REDUCE_GRAD deferred to here); the other stages' reductions are in flight already.
        sum_tied_gradients();
        for (auto& [index, stage] : stages_) stage.sharding->finish_reduce();
        for (auto& [index, stage] : stages_) {
            stage.sharding->step([&](std::span<scalar> params, std::span<const scalar> grads, std::size_t offset) {
                stage.optimizer.step(params, grads, stage.model.registry(), offset);
            });
        }
        // Every rank reports the same loss: last-stage ranks contribute their replica's mean
        // (once per replica: tensor-parallel slices of it compute the same loss).
        // One reduction carries the loss and every rank's idle fraction of the program.
        const bool reports_loss = owns_last_stage() && grid_->coordinates().tp_index == 0;
        double totals[2] = {reports_loss ? loss_sum_ / config_.dp() : 0.0,
                            program_seconds_ > 0 ? 1.0 - compute_seconds_ / program_seconds_ : 0.0};
        world_->allreduce_sum(std::span<double>(totals));
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return {steps_done_++, totals[0], 1e3 * seconds, options_.batch_size / seconds,
                totals[1] / world_->size()};
    }

    [[nodiscard]] const sched::program& program() const { return program_; }
    [[nodiscard]] const parallel_config& config() const { return config_; }
    [[nodiscard]] int pipeline_rank() const { return grid_->coordinates().pp_index; }
    [[nodiscard]] const comm::grid_coordinates& coordinates() const { return grid_->coordinates(); }
    // The stages this rank runs, by global stage index.
    [[nodiscard]] std::vector<int> local_stages() const {
        std::vector<int> out;
        for (const auto& [index, stage] : stages_) out.push_back(index);
        return out;
    }
    [[nodiscard]] const stage_type& stage(int index) const { return find_stage(index).model; }
    // The compute backend object the stages run on.
    [[nodiscard]] Backend& backend() { return *backend_; }
    // For loading checkpoints: the stage's parameters may be overwritten between steps.
    [[nodiscard]] stage_type& mutable_stage(int index) { return find_stage(index).model; }
    [[nodiscard]] optim::any_optimizer<scalar>& stage_optimizer(int index) { return find_stage(index).optimizer; }
    // The model units each stage holds, by global stage index.
    [[nodiscard]] const std::vector<nn::unit_range>& stage_units() const { return units_; }
    [[nodiscard]] const model_config& model() const { return model_; }
    // The ranks holding the stages of this rank's replica; pipeline rank i is rank i here.
    [[nodiscard]] Comm& pipeline_group() { return grid_->pipeline(); }
    // This rank's idle share of the last step's program: the time it spent waiting for
    // data or for its sends, over the program's wall time. The step log's bubble is the
    // mean of this over all ranks.
    [[nodiscard]] double idle_fraction() const {
        return program_seconds_ > 0 ? 1.0 - compute_seconds_ / program_seconds_ : 0.0;
    }
    // Most micro-batches whose activations this rank held at once during the last step.
    [[nodiscard]] std::size_t peak_stashed() const { return stash_peak_; }

    // What this rank holds for its stages (see memory_report).
    [[nodiscard]] memory_report memory() const {
        memory_report report;
        for (const auto& [index, stage] : stages_) {
            auto now = stage.sharding->held_now();
            now.optimizer_state = optimizer_state_bytes(stage.optimizer);
            report.between_steps = report.between_steps + now;
            auto peak = stage.sharding->peak();
            peak.optimizer_state = now.optimizer_state;
            report.peak = report.peak + peak;
        }
        report.peak_activations = activation_peak_bytes_;
        return report;
    }

    // Runs fn(stage_index, stage) for every local stage with its full parameters present:
    // under ZeRO-3 they are all-gathered for the call and released after. Collective over
    // the data-parallel group (checkpoints and weight inspection use it).
    template <class Fn>
    void with_full_parameters(Fn&& fn) {
        for (auto& [index, stage] : stages_) stage.sharding->with_full_parameters([&] { fn(index, stage.model); });
    }
    // Runs fn(stage) to write all of stage `index`'s parameters (a loaded checkpoint) and
    // keeps what this rank holds of them; not collective.
    template <class Fn>
    void overwrite_parameters(int index, Fn&& fn) {
        auto& stage = find_stage(index);
        stage.sharding->overwrite_parameters([&] { fn(stage.model); });
    }
    [[nodiscard]] const shard::stage_state<scalar, Comm>& stage_sharding(int index) const {
        return *find_stage(index).sharding;
    }
    [[nodiscard]] Comm& data_group() { return grid_->data(); }
    // The ranks holding the other tensor-parallel slices of this rank's stages.
    [[nodiscard]] Comm& tensor_group() { return grid_->tensor(); }
    // The parameter layout of stage `index` on tensor-parallel rank `tp_rank` (any rank's,
    // without building it): what checkpoints assemble slices with.
    [[nodiscard]] nn::parameter_registry stage_layout(int index, int tp_rank) const {
        const auto units = units_.at(static_cast<std::size_t>(index));
        if constexpr (tensor_parallel_model) return stage_type::layout(model_, units, tp_rank, config_.tp());
        else return stage_type::layout(model_, units);
    }

private:
    static constexpr int max_tag = 32767;

    // Finds, for every tied tensor, the stages (local and remote) that hold a copy, and
    // builds the group of pipeline ranks to sum its gradient over. Collective over the
    // pipeline group: every rank splits once per tied tensor, holder or not.
    void tie_parameters() {
        for (const auto& tied : Model::tied_parameters(model_)) {
            std::vector<int> holder_ranks;
            tie t{tied.name, {}, nullptr};
            for (int s = 0; s < program_.num_stages; ++s) {
                bool holds = false;
                for (const int unit : tied.units) holds = holds || (unit >= units_[s].first && unit < units_[s].last);
                if (!holds) continue;
                const int rank = program_.stage_rank[s];
                if (holder_ranks.empty() || holder_ranks.back() != rank) holder_ranks.push_back(rank);
                if (rank == pipeline_rank()) t.local_stages.push_back(s);
            }
            std::sort(holder_ranks.begin(), holder_ranks.end());
            holder_ranks.erase(std::unique(holder_ranks.begin(), holder_ranks.end()), holder_ranks.end());
            const bool holds_here = !t.local_stages.empty();
            if (holder_ranks.size() > 1) {
                Comm group = grid_->pipeline().split(holds_here ? 0 : 1, pipeline_rank());
                if (holds_here) t.holders = std::make_unique<Comm>(std::move(group));
            }
            if (holds_here && (t.local_stages.size() > 1 || t.holders)) ties_.push_back(std::move(t));
        }
    }

    // Every copy of a tied tensor gets the sum of all copies' gradients, so the copies,
    // which start equal, take identical optimizer steps and stay equal.
    void sum_tied_gradients() {
        for (auto& t : ties_) {
            std::vector<scalar> total;
            for (const int s : t.local_stages) {
                auto& stage = find_stage(s).model;
                const auto& info = stage.registry().find(t.name);
                const auto grads = stage.gradients().subspan(info.offset, info.size);
                if (total.empty()) total.assign(grads.begin(), grads.end());
                else
                    for (std::size_t i = 0; i < total.size(); ++i) total[i] += grads[i];
            }
            if (t.holders) t.holders->allreduce_sum(std::span<scalar>(total));
            for (const int s : t.local_stages) {
                auto& stage = find_stage(s).model;
                const auto& info = stage.registry().find(t.name);
                std::copy(total.begin(), total.end(), stage.gradients().subspan(info.offset, info.size).begin());
            }
        }
    }

    // Balanced by the model's estimated cost per unit where it gives one (GPT: flops), else
    // as even as possible in unit count.
    static std::vector<nn::unit_range> default_partition(const model_config& model, int num_units, int stages) {
        if constexpr (requires { Model::unit_costs(model); }) {
            const std::vector<double> costs = Model::unit_costs(model);
            require(static_cast<int>(costs.size()) == num_units, "unit_costs size", costs.size(),
                    "the model policy must give one cost per unit (" + std::to_string(num_units) + ")");
            return nn::partition_by_cost(costs, stages);
        } else {
            return nn::partition_units(num_units, stages);
        }
    }

    stage_type make_stage(nn::unit_range units) {
        if constexpr (tensor_parallel_model)
            return stage_type(*backend_, model_, units, nn::make_tp_group<scalar>(grid_->tensor()));
        else
            return stage_type(*backend_, model_, units);
    }

    // The config with its schedule filled in, checked again against that schedule's layout.
    static parallel_config with_schedule_chosen(const parallel_config& config) {
        if (config.schedule().chosen()) return config;
        parallel_options options = config.options();
        options.schedule = schedules::default_kind();
        return parallel_config(options);
    }

    static sched::program generate_checked(const parallel_config& config) {
        return schedules::generate(config.schedule(),
                                   sched::schedule_params{.ranks = config.pp(), .microbatches = config.microbatches(),
                                                          .chunks = config.chunks()});
    }
    enum class direction { forward = 0, backward = 1 };

    struct local_stage {
        stage_type model;
        optim::any_optimizer<scalar> optimizer;  // this stage's optimizer and its state
        // How the stage's state is spread over the data-parallel group (Sharding's ZeRO stage).
        std::unique_ptr<shard::stage_state<scalar, Comm>> sharding;
    };

    static std::size_t optimizer_state_bytes(const optim::any_optimizer<scalar>& optimizer) {
        return optimizer.state_elements() * sizeof(scalar);
    }
    struct in_flight_recv {
        matrix buffer;
        typename Comm::request request;
    };
    struct in_flight_send {
        matrix buffer;
        typename Comm::request request;
    };

    // Per-step state; rebuilt by run_program so nothing leaks from one step to the next.
    struct step_state {
        const batch_type* batch = nullptr;
        activation_stash<typename stage_type::stash> stash;
        std::map<std::pair<int, int>, matrix> outputs;        // F output, kept for SEND_F / next local stage
        std::map<std::pair<int, int>, matrix> input_grads;    // B/I output, kept for SEND_B / previous local stage
        std::map<std::pair<int, int>, matrix> loss_grads;     // d loss / d logits of the last stage
        std::map<std::tuple<int, int, int>, in_flight_recv> recvs;  // (direction, stage, mb)
        std::vector<in_flight_send> sends;
    };

    void run_program(const batch_type& batch) {
        step_state state;
        state.batch = &batch;
        loss_sum_ = 0;
        compute_seconds_ = 0;
        activation_peak_bytes_ = 0;
        const auto program_start = std::chrono::steady_clock::now();
        const auto& actions = program_.ranks[pipeline_rank()];
        std::size_t posted_until = 0;
        for (std::size_t i = 0; i < actions.size(); ++i) {
            // Post RECVs ahead so that the data can arrive while this rank computes.
            for (; posted_until < actions.size() && posted_until <= i + options_.recv_lookahead; ++posted_until)
                post_recv(actions[posted_until], state);
            execute(actions[i], state);
        }
        for (auto& send : state.sends) send.request.wait();
        program_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - program_start).count();
        if (state.stash.live() != 0)
            throw error("the program left " + std::to_string(state.stash.live()) +
                        " micro-batches stashed; every forward needs its backward in the same step");
        stash_peak_ = state.stash.peak();
    }

    void post_recv(const sched::action& a, step_state& state) {
        using sched::action_kind;
        if (a.kind != action_kind::RECV_F && a.kind != action_kind::RECV_B) return;
        const bool forward = a.kind == action_kind::RECV_F;
        const auto& stage = find_stage(a.stage).model;
        const int peer_stage = forward ? a.stage - 1 : a.stage + 1;
        in_flight_recv recv{matrix(Model::activation_rows(model_, rows_per_microbatch_),
                                   forward ? stage.input_width() : stage.output_width()),
                            {}};
        recv.request = grid_->pipeline().irecv(as_writable_bytes(recv.buffer), program_.stage_rank[peer_stage],
                                              tag(forward ? direction::forward : direction::backward, a.stage, a.microbatch));
        state.recvs.emplace(std::tuple{forward ? 0 : 1, a.stage, a.microbatch}, std::move(recv));
    }

    void execute(const sched::action& a, step_state& state) {
        using sched::action_kind;
        switch (a.kind) {
            case action_kind::F:
            case action_kind::B:
            case action_kind::I:
            case action_kind::W: {
                const auto start = std::chrono::steady_clock::now();
                compute(a, state);
                compute_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                break;
            }
            case action_kind::OVERLAP_F_B: {
                // On the CPU backend the pair runs back to back; the overlap DualPipe gains
                // is compute hiding communication, which needs separate streams (CUDA).
                const auto start = std::chrono::steady_clock::now();
                compute(sched::forward_part(a), state);
                compute(sched::backward_part(a), state);
                compute_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                break;
            }
            case action_kind::REDUCE_GRAD:
                // A stage holding a tied tensor first needs the other copies' gradients
                // (summed after the program); its reduction starts then.
                if (!holds_tied_tensor(a.stage)) find_stage(a.stage).sharding->start_reduce();
                break;
            case action_kind::UNSHARD: find_stage(a.stage).sharding->start_unshard(); break;
            case action_kind::RESHARD: find_stage(a.stage).sharding->reshard(); break;
            case action_kind::SEND_F: send(direction::forward, a, state.outputs, state); break;
            case action_kind::SEND_B: send(direction::backward, a, state.input_grads, state); break;
            case action_kind::RECV_F: receive(0, a, state.outputs, a.stage - 1, state); break;
            case action_kind::RECV_B: receive(1, a, state.input_grads, a.stage + 1, state); break;
            default:
                throw invalid_argument("action", sched::to_string(a),
                                       "the engine runs F, B, I, W, OVERLAP_F_B, SEND_F/B, RECV_F/B, REDUCE_GRAD, "
                                       "UNSHARD and RESHARD");
        }
    }

    void compute(const sched::action& a, step_state& state) {
        using sched::action_kind;
        find_stage(a.stage).sharding->finish_unshard();
        switch (a.kind) {
            case action_kind::F:
                forward(a.stage, a.microbatch, state);
                // Only a forward adds activations (I trims an entry, W frees it), so the peak
                // is seen right after one; sampling after every action would walk the stash
                // three times as often for nothing.
                activation_peak_bytes_ = std::max(activation_peak_bytes_, state.stash.bytes());
                break;
            case action_kind::B:
                backward_input(a.stage, a.microbatch, state);
                backward_weight(a.stage, a.microbatch, state);
                break;
            case action_kind::I: backward_input(a.stage, a.microbatch, state); break;
            case action_kind::W: backward_weight(a.stage, a.microbatch, state); break;
            default:
                throw invalid_argument("compute action", sched::to_string(a), "expected F, B, I or W");
        }
    }

    void forward(int stage_index, int mb, step_state& state) {
        auto& stage = find_stage(stage_index).model;
        auto& stash = state.stash.insert(stage_index, mb, typename stage_type::stash{});
        matrix output =
            stage.is_first()
                ? stage.forward(Model::template first_input<Backend>(*backend_, *state.batch, first_row(mb),
                                                                  rows_per_microbatch_),
                                stash)
                : stage.forward(take(state.outputs, stage_index - 1, mb, "F needs the previous stage's output"), stash);
        if (stage.is_last()) {
            const auto result = Model::template loss<Backend>(stage, output, *state.batch, first_row(mb), rows_per_microbatch_,
                                                              scalar{1} / config_.microbatches());
            loss_sum_ += static_cast<double>(result.loss) / config_.microbatches();
            state.loss_grads.emplace(std::pair{stage_index, mb}, std::move(result.dlogits));
        } else {
            state.outputs.emplace(std::pair{stage_index, mb}, std::move(output));
        }
    }

    void backward_input(int stage_index, int mb, step_state& state) {
        auto& stage = find_stage(stage_index).model;
        matrix grad_output = stage.is_last()
                                 ? take(state.loss_grads, stage_index, mb, "B needs the loss gradient")
                                 : take(state.input_grads, stage_index + 1, mb, "B needs the next stage's input gradient");
        matrix grad_input = stage.backward_input(std::move(grad_output), state.stash.at(stage_index, mb));
        if (!stage.is_first()) state.input_grads.emplace(std::pair{stage_index, mb}, std::move(grad_input));
    }

    void backward_weight(int stage_index, int mb, step_state& state) {
        find_stage(stage_index).model.backward_weight(state.stash.at(stage_index, mb));
        state.stash.erase(stage_index, mb);
    }

    void send(direction dir, const sched::action& a, std::map<std::pair<int, int>, matrix>& source, step_state& state) {
        const int peer_stage = dir == direction::forward ? a.stage + 1 : a.stage - 1;
        in_flight_send out{take(source, a.stage, a.microbatch, "SEND needs the data its compute produced"), {}};
        out.request = grid_->pipeline().isend(as_bytes(out.buffer), program_.stage_rank[peer_stage],
                                             tag(dir, peer_stage, a.microbatch));
        state.sends.push_back(std::move(out));
    }

    // Completes a posted RECV and files the data where the compute that needs it looks.
    void receive(int dir, const sched::action& a, std::map<std::pair<int, int>, matrix>& target, int peer_stage,
                 step_state& state) {
        const auto it = state.recvs.find({dir, a.stage, a.microbatch});
        if (it == state.recvs.end()) throw error("internal: RECV " + sched::to_string(a) + " was not posted");
        it->second.request.wait();
        target.emplace(std::pair{peer_stage, a.microbatch}, std::move(it->second.buffer));
        state.recvs.erase(it);
    }

    // Replica d takes rows [d*B/dp, (d+1)*B/dp); its micro-batch j the j-th slice of those.
    [[nodiscard]] int first_row(int mb) const {
        return (grid_->coordinates().dp_index * config_.microbatches() + mb) * rows_per_microbatch_;
    }

    [[nodiscard]] int tag(direction dir, int receiving_stage, int mb) const {
        return (static_cast<int>(dir) * program_.num_stages + receiving_stage) * program_.num_microbatches + mb;
    }

    static matrix take(std::map<std::pair<int, int>, matrix>& from, int stage, int mb, const char* why) {
        const auto it = from.find({stage, mb});
        if (it == from.end())
            throw error(std::string(why) + " (stage " + std::to_string(stage) + ", micro-batch " +
                        std::to_string(mb) + "), but it is not there: the program is out of order");
        matrix value = std::move(it->second);
        from.erase(it);
        return value;
    }

    static std::span<const std::byte> as_bytes(const matrix& m) {
        return std::as_bytes(std::span<const scalar>(m.data(), static_cast<std::size_t>(m.size())));
    }
    static std::span<std::byte> as_writable_bytes(matrix& m) {
        return std::as_writable_bytes(std::span<scalar>(m.data(), static_cast<std::size_t>(m.size())));
    }

    [[nodiscard]] bool owns_last_stage() const { return stages_.contains(program_.num_stages - 1); }
    [[nodiscard]] bool holds_tied_tensor(int stage) const {
        for (const auto& t : ties_)
            if (std::find(t.local_stages.begin(), t.local_stages.end(), stage) != t.local_stages.end()) return true;
        return false;
    }

    local_stage& find_stage(int index) {
        const auto it = stages_.find(index);
        if (it == stages_.end())
            throw invalid_argument("stage", index, "is not run by pipeline rank " + std::to_string(pipeline_rank()));
        return it->second;
    }
    const local_stage& find_stage(int index) const { return const_cast<engine*>(this)->find_stage(index); }

    // On the heap: stages hold a pointer to it, which must not change when the engine moves.
    std::unique_ptr<Backend> backend_;
    Comm* world_;
    parallel_config config_;
    model_config model_;
    engine_options options_;
    // On the heap: stages' tensor-parallel groups and the sharding state hold references
    // to its communicators, which must not move when the engine does.
    std::unique_ptr<comm::process_grid<Comm>> grid_;
    sched::program program_;
    std::map<int, local_stage> stages_;
    std::vector<nn::unit_range> units_;  // per stage: the model units it holds
    // Tied tensors this rank holds: the name, and the group of pipeline ranks that hold a copy.
    struct tie {
        std::string name;
        std::vector<int> local_stages;
        std::unique_ptr<Comm> holders;  // null when this rank is the only holder
    };
    std::vector<tie> ties_;
    int rows_per_microbatch_ = 0;
    double loss_sum_ = 0;
    long long steps_done_ = 0;
    std::size_t stash_peak_ = 0;
    std::size_t activation_peak_bytes_ = 0;  // last step: most stashed activation bytes at once
    double compute_seconds_ = 0;  // last step: time in F/B/I/W on this rank
    double program_seconds_ = 0;  // last step: wall time of this rank's program
};

}  // namespace weft::train

namespace weft {
// The composition reads like a sentence:
//   weft::engine<weft::sched::one_f_one_b, weft::shard::replicate, weft::comm::mpi, weft::exec::cpu>
template <class Schedules, sharding Sharding, communicator Comm, compute_backend Backend,
          class Model = models::mlp>
using engine = train::engine<Schedules, Sharding, Comm, Backend, Model>;
}  // namespace weft
