// Everything weft offers that needs neither MPI nor CUDA, in one include, layer by layer
// (docs/architecture.md draws them). What it leaves out, and why:
//   weft/comm/mpi.hpp, weft/comm/mpi_environment.hpp   link weft::mpi (they include <mpi.h>)
//   weft/comm/nccl.hpp, weft/gpu/..., weft/exec/cuda/...      link weft::cuda or weft::nccl
//   weft/exec/cpu_gemm_rate.hpp, weft/train/mfu.hpp    measuring and reporting, for the examples
//   weft/models/gpt.hpp, weft/data/token_batches.hpp, weft/io/...   GPT-2 and its files: include
//                                                       them when you train GPT-2
//   weft/run/...   a training program's launch, trainer and options: include what the program
//                  uses (run/options.hpp needs CLI11; docs/own_model.md, docs/running.md)
#pragma once

// core: errors, sizes as values, the counter-based RNG, where memory lives.
#include "weft/core/dtype.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/core/rng.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/core/tensor_view.hpp"
#include "weft/core/type_list.hpp"

// sched: every schedule (through the one list of them), lowering, checks, simulation and pictures.
#include "weft/sched/action.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/cost_model.hpp"
#include "weft/sched/csv.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/render_ascii.hpp"
#include "weft/sched/render_json.hpp"
#include "weft/sched/render_svg.hpp"
#include "weft/sched/render_trace.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/sched/schedule_params.hpp"
#include "weft/sched/shard_actions.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/sched/validate.hpp"

// comm: the communicator concept, the in-process (threads) communicator and the process grid.
#include "weft/comm/communicator.hpp"
#include "weft/comm/host_side.hpp"
#include "weft/comm/local.hpp"
#include "weft/comm/process_grid.hpp"
#include "weft/comm/with_host.hpp"

// exec: the compute-backend concept and the CPU backend.
#include "weft/exec/compute_backend.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/exec/cpu_heap.hpp"

// nn, optim, shard: the MLP's layers, the optimizers, the sharding policies and the training state.
#include "weft/nn/mlp.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/optim/optimizer_state.hpp"
#include "weft/optim/sgd.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/shard/sharding.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/shard/training_state.hpp"
#include "weft/shard/zero.hpp"
#include "weft/shard/zero_memory.hpp"

// elastic: online layout switching: a layout as an ownership map of the virtual parameter
// space, the transition plan between two, and its execution (engine.reconfigure() uses them).
#include "weft/elastic/layout.hpp"
#include "weft/elastic/switch_report.hpp"
#include "weft/elastic/transfer.hpp"
#include "weft/elastic/transition_plan.hpp"

// data, models: the synthetic data set and the MLP model policy the quick start trains.
#include "weft/data/synthetic_dataset.hpp"
#include "weft/models/mlp.hpp"
#include "weft/models/pipeline_model.hpp"

// train: the engine (its layout can switch online) and its parts (the engine of one layout,
// stage runner, program loop), the step log, the non-finite guard and the
// learning-rate schedule.
#include "weft/train/engine.hpp"
#include "weft/train/engine_options.hpp"
#include "weft/train/finite_guard.hpp"
#include "weft/train/layout_engine.hpp"
#include "weft/train/lr_schedule.hpp"
#include "weft/train/program_loop.hpp"
#include "weft/train/stage_runner.hpp"
#include "weft/train/step_log.hpp"
