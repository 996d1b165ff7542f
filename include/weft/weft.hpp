// Everything weft offers without MPI or CUDA, in one include. The MPI communicator
// is in "weft/comm/mpi.hpp" (link weft::mpi); CUDA parts link weft::cuda.
#pragma once

#include "weft/core/dtype.hpp"
#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/core/rng.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/core/tensor_view.hpp"

#include "weft/sched/action.hpp"
#include "weft/sched/any_of.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/validate.hpp"

#include "weft/comm/communicator.hpp"
#include "weft/comm/local.hpp"
#include "weft/comm/process_grid.hpp"

#include "weft/exec/compute_backend.hpp"
#include "weft/exec/cpu.hpp"

#include "weft/nn/mlp.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/optim/sgd.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/shard/sharding.hpp"

#include "weft/train/engine.hpp"
#include "weft/train/optimizer.hpp"
#include "weft/train/step_log.hpp"
#include "weft/train/synthetic_dataset.hpp"
