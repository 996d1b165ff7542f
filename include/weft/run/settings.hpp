// What a training run is told: the launch, the layout, the optimizer and its schedule, the
// data, checkpoints, validation and logs, as plain values with one set of defaults. The
// trainer reads them; run/options.hpp puts them on a command line (this header needs no
// CLI11, and nvcc can compile it).
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::run {

struct settings {
    // ---- launch ----
    int ranks = 0;              // without mpirun: ranks as threads; 0: the layout's product
    double comm_timeout = 300;  // seconds a rank waits on a peer before it aborts the job
    int threads = 0;            // a rank's CPU kernel threads; 0: the cores shared among the machine's ranks
    // ---- layout ----
    std::string schedule = "1f1b";
    // A compute-only program's CSV (PyTorch's form, sched/csv.hpp) run instead of `schedule`'s
    // generated one; empty: none. Checked before the first step (run/program_file.hpp).
    std::string program;
    int pp = 1;
    int dp = 1;
    int tp = 1;
    int zero = 0;
    // ZeRO-2/3: reduce once per step or each layer per micro-batch (shard/zero_reduce.hpp).
    std::string zero_reduce = "step";
    int chunks = 0;  // 0: the schedule's default
    int microbatches = 4;
    std::vector<int> partition;         // units per stage; empty: balanced by estimated cost
    // Activation recompute (train/recompute.hpp): none, full or selective for every stage, or
    // one per stage separated by commas.
    std::string recompute = "none";
    std::vector<std::string> switches;  // STEP:key=value,... (run/layout.hpp)
    double staging_mib = 64;            // the staging cap of a switch's transfers
    // ---- training ----
    long long steps = 20;  // the step the run ends at: a resumed run trains the rest
    int batch = 8;         // samples (sequences) per step over every replica
    unsigned long long seed = 1234;
    std::string optimizer = "adamw";
    double lr = 3e-4;
    double weight_decay = 0;
    double grad_clip = 0;  // the global gradient norm to clip to; 0: no clipping
    long long warmup_steps = 0;
    double min_lr = 0;           // 0: lr (no decay)
    long long decay_steps = -1;  // -1: steps
    int skip_nonfinite = 0;      // non-finite steps skipped (not applied) before the run stops
    // ---- data and validation ----
    std::string data;
    std::string val_data;
    long long val_every = 0;  // 0: at the end only
    int val_batches = 8;
    // ---- checkpoints ----
    std::string checkpoint_dir;      // a root of step-<n>/ directories with a `latest`; empty: none
    long long checkpoint_every = 0;  // 0: at the end (and when stopped by a signal) only
    int keep = 0;                    // newest checkpoints kept; 0: all
    std::string resume;              // a checkpoint directory, or a root whose `latest` names one
    bool overwrite = false;          // a fresh run may replace the checkpoints in checkpoint_dir
    std::string init_from;           // safetensors weights (and their .optimizer companion)
    std::string save;                // safetensors file written at the end
    // ---- logs ----
    std::string log_json;     // one JSON object per step
    double peak_tflops = 0;   // MFU's peak; 0: the program's default (a measured or tabled peak)
    bool kernel_profile = false;  // a backend that times its operations prints them at the end
    // ---- elastic ----
    bool elastic = false;              // ranks may leave, fail or join while the run trains
    std::string control_file;          // leave/grow lines appended here (run/elastic_control.hpp)
    int world_max = 0;                 // the most ranks a grow may reach; 0: the ranks launched
    int mirror_every = 1;              // steps between mirrors of a rank's unique state on a buddy
    std::string leave_signal = "USR1";  // USR1, USR2 or none (run/leave_signal.hpp)
    std::string join_control;           // --join: the --control FILE of a running job to join (run/join_connect.hpp)

    [[nodiscard]] double final_lr() const { return min_lr > 0 ? min_lr : lr; }
    [[nodiscard]] long long decay_end() const { return decay_steps >= 0 ? decay_steps : steps; }
};

// Checks the elastic settings against the launch, before anything trains: --elastic needs
// the MPI communicator (ranks as threads share one process, so none can leave or fail
// alone), and --world-max may not be below the ranks launched. Returns the notice to print
// at the start (empty when none): without ULFM (MPI's fault tolerance) a crash ends the run.
[[nodiscard]] inline std::string check_elastic_settings(const settings& s, bool on_mpi, bool has_ulfm,
                                                        int world_size) {
    if (!s.elastic) return {};
    if (!on_mpi)
        throw error(
            "--elastic needs the MPI communicator: launch with mpirun (or srun), e.g. mpirun -np 4 train_gpt "
            "--elastic ...; ranks as threads share one process, so none can leave, fail or join alone");
    require(s.world_max == 0 || s.world_max >= world_size, "--world-max", s.world_max,
            "must be at least the ranks launched (" + std::to_string(world_size) + "), or 0 for exactly those");
    require(s.mirror_every >= 1, "--mirror-every", s.mirror_every, "must be >= 1");
    require(s.leave_signal == "USR1" || s.leave_signal == "USR2" || s.leave_signal == "none", "--leave-signal",
            s.leave_signal, "must be USR1, USR2 or none");
    if (!has_ulfm)
        return "built without MPI fault tolerance (ULFM): a crash of a rank ends the run (exit 2, newest "
               "checkpoint intact); leave and join still work; see docs/elastic.md";
    return {};
}

// GPT's sizes on a command line (models::gpt's config adds the seed).
struct gpt_sizes {
    int layers = 4;
    int d_model = 128;
    int heads = 4;
    int vocab = 256;
    int seq_len = 64;
};

// The MLP's sizes (models::mlp) on a command line.
struct mlp_sizes {
    int input_dim = 32;
    int hidden = 64;
    int blocks = 6;
    int classes = 8;
};

}  // namespace weft::run
